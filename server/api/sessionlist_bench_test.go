package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"testing"
	"time"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
	"reeve.dev/reeve/server/store"
)

// BenchmarkAuthorizedSessionList lists sessions (limit 100) in a workspace
// of 10k private sessions with 50 ACL entries each. The baseline is the
// workspace owner (every session visible); the member holds a grant on
// one session in 100, so the list pages through all of them.
func BenchmarkAuthorizedSessionList(b *testing.B) {
	s := servertest.Start(b, servertest.Options{})
	owner := s.NewUser("o@example.com")
	member := s.AddMember(owner.Workspace, "m@example.com", sdk.RoleMember)
	ctx := context.Background()
	now := time.Now().UTC()
	// Written 500 to a transaction, through the store (the access index
	// follows every write path), to keep the set-up short.
	var batch []store.Record
	flush := func() {
		if err := s.Store().InTx(ctx, func(tx store.RecordTx) error {
			for i := range batch {
				r := batch[i]
				if err := tx.Create(&r); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		batch = batch[:0]
	}
	n := 10000
	if testing.Short() {
		n = 1000 // a quick look
	}
	for i := 0; i < n; i++ {
		acl := map[string]any{}
		for j := 0; j < 50; j++ {
			uid := int64(1000 + j)
			if j == 0 && i%100 == 0 {
				uid = member.ID
			}
			acl[fmt.Sprintf("user:%d", uid)] = map[string]any{"id": fmt.Sprintf("e%d", j), "subject_type": "user", "subject_id": uid, "role": "viewer"}
		}
		a, _ := json.Marshal(map[string]any{"title": "s", "source_kind": "cli", "status": "active", "visibility_scope": "private", "owner_user_id": owner.ID, "acl": acl})
		batch = append(batch, store.Record{ID: fmt.Sprintf("S%025d", i), WorkspaceID: owner.Workspace, Collection: "sessions", Attributes: a, CreatedBy: "user:1", CreatedAt: now, UpdatedAt: now})
		if len(batch) == 500 {
			flush()
		}
	}
	b.Logf("set-up of %d sessions: %v", n, time.Since(now))
	for _, c := range []struct {
		name, token string
		want        int
	}{{"owner-baseline", owner.Token, 100}, {"member-acl", member.Token, min(100, n/100)}} {
		b.Run(c.name, func(b *testing.B) {
			var lat []time.Duration
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				req, _ := http.NewRequest("GET", s.URL+"/api/resources/"+owner.Workspace+"/sessions?limit=100", nil)
				req.Header.Set("Authorization", "Bearer "+c.token)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				var out struct {
					Data []any `json:"data"`
				}
				json.NewDecoder(resp.Body).Decode(&out)
				resp.Body.Close()
				lat = append(lat, time.Since(t0))
				if len(out.Data) != c.want {
					b.Fatalf("%d sessions", len(out.Data))
				}
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
