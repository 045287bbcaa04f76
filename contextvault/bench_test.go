package contextvault

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"reeve.dev/reeve/contextvault/seal"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
	"reeve.dev/reeve/server/store"
)

// benchDevice is an initialized device with a vault, against a real server.
func benchDevice(b *testing.B, srv *servertest.Server, u servertest.User, name string) *Vault {
	b.Helper()
	in, err := u.Client.CreateInstall(context.Background(), u.Workspace, name)
	if err != nil {
		b.Fatal(err)
	}
	cc := &sdk.ContextClient{Client: &sdk.Client{BaseURL: srv.URL, Token: in.IssueToken, HTTP: &http.Client{Timeout: 5 * time.Minute}}, WorkspaceID: u.Workspace}
	v, err := Open(Options{Home: filepath.Join(b.TempDir(), name), Server: cc})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { v.Close() })
	return v
}

// seed writes n sealed entries into a vault's outbox in one transaction
// (Add syncs each one to disk; a benchmark's setup need not).
func seed(b *testing.B, v *Vault, src Source, n int) {
	b.Helper()
	key, err := v.epochKey(src.ID, src.Epoch)
	if err != nil {
		b.Fatal(err)
	}
	topics := []string{"billing invoices", "database migrations", "frontend styling", "release process", "error handling", "logging", "authentication", "caching"}
	now := time.Now().UTC()
	err = v.l.tx(context.Background(), func(tx *sql.Tx) error {
		for i := 0; i < n; i++ {
			topic := topics[i%len(topics)]
			e := Event{SourceID: src.ID, EventID: newID(), EntryID: newID(), Kind: sdk.EventPut, Epoch: src.Epoch, UseWhen: topic, DeviceID: v.DeviceID(), CreatedAt: now}
			body := fmt.Sprintf("Entry %d about %s. Keep entries short: a convention, why it exists, and an example.", i, topic)
			plain := []byte(fmt.Sprintf(`{"title":"%s rule %d","body":%q,"tags":["t%d"]}`, topic, i, body, i%50))
			if e.Ciphertext, err = seal.Seal(key, headerOf(e), plain); err != nil {
				return err
			}
			if err := insertEvent(tx, e); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkResolve10k resolves a task against 10,000 entries, beside the
// bare read of the same events from the local database (the baseline).
func BenchmarkResolve10k(b *testing.B) {
	ctx := context.Background()
	srv := servertest.Start(b, servertest.Options{})
	u := srv.NewUser("bench@example.com")
	v := benchDevice(b, srv, u, "bench")
	res, err := v.Init(ctx, "bench", "team")
	if err != nil {
		b.Fatal(err)
	}
	seed(b, v, *res.Vault, 10000)
	dir := b.TempDir()
	b.Run("read-events-baseline", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			evs, err := v.l.allEvents(res.Vault.ID)
			if err != nil || len(evs) != 10000 {
				b.Fatal(len(evs), err)
			}
		}
	})
	b.Run("resolve", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			r, err := v.Resolve(ctx, ResolveOptions{Dir: dir, Task: "add a database migration for billing invoices"})
			if err != nil || r.Considered != 10000 || len(r.Entries) == 0 {
				b.Fatal(r.Considered, err)
			}
		}
	})
}

// BenchmarkSync pushes 2,000 entries from one device and pulls them on
// another of the same user, in entries per second, beside the server's
// store appending the same events without HTTP or crypto (the baseline).
func BenchmarkSync(b *testing.B) {
	const n = 2000
	ctx := context.Background()
	srv := servertest.Start(b, servertest.Options{})
	u := srv.NewUser("bench@example.com")
	a := benchDevice(b, srv, u, "a")
	res, err := a.Init(ctx, "a", "team")
	if err != nil {
		b.Fatal(err)
	}
	bdev := benchDevice(b, srv, u, "b")
	d2, err := bdev.Init(ctx, "b", "")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := a.EnrollApprove(ctx, d2.Device.ID, d2.Fingerprint); err != nil {
		b.Fatal(err)
	}
	if _, err := bdev.EnrollAccept(ctx); err != nil {
		b.Fatal(err)
	}
	src := *res.Vault
	b.Run("push", func(b *testing.B) {
		var total time.Duration
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			seed(b, a, src, n)
			b.StartTimer()
			start := time.Now()
			if _, err := a.SyncPush(ctx, src.ID); err != nil {
				b.Fatal(err)
			}
			total += time.Since(start)
		}
		b.ReportMetric(float64(n*b.N)/total.Seconds(), "entries/s")
	})
	b.Run("pull", func(b *testing.B) {
		var total time.Duration
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			seed(b, a, src, n)
			if _, err := a.SyncPush(ctx, src.ID); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			start := time.Now()
			out, err := bdev.SyncPull(ctx, src.ID)
			if err != nil || out[0].Pulled < n {
				b.Fatal(out, err)
			}
			total += time.Since(start)
		}
		b.ReportMetric(float64(n*b.N)/total.Seconds(), "entries/s")
	})
	b.Run("store-append-baseline", func(b *testing.B) {
		cv := srv.Store().(store.ContextVaults)
		evs, err := a.l.allEvents(src.ID)
		if err != nil || len(evs) < n {
			b.Fatal(len(evs), err)
		}
		var total time.Duration
		for i := 0; i < b.N; i++ {
			batch := make([]store.ContextEvent, 0, 200)
			start := time.Now()
			for j := 0; j < n; j++ {
				e := evs[j]
				batch = append(batch, store.ContextEvent{EventID: newID(), EntryID: e.EntryID + "x", Kind: e.Kind, Epoch: e.Epoch, Ciphertext: e.Ciphertext, Digest: newID(), DeviceID: e.DeviceID, CreatedAt: time.Now()})
				if len(batch) == 200 {
					if _, _, err := cv.AppendContextEvents(ctx, u.Workspace, src.ID, batch, func(store.ContextSource) error { return nil }); err != nil {
						b.Fatal(err)
					}
					batch = batch[:0]
				}
			}
			total += time.Since(start)
		}
		b.ReportMetric(float64(n*b.N)/total.Seconds(), "entries/s")
	})
}
