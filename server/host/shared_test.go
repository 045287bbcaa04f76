package host_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/coder/websocket"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
	"reeve.dev/reeve/server/store/storetest"
)

// replicasWith starts two servers on one PostgreSQL database with options o.
func replicasWith(t *testing.T, o servertest.Options) (*servertest.Server, *servertest.Server) {
	t.Helper()
	o.DatabaseURL = storetest.PostgresURL(t)
	o.DataDir = filepath.Join(t.TempDir(), "data")
	o.PublicURL = "http://replicas.test"
	return servertest.Start(t, o), servertest.Start(t, o)
}

// waitStatus polls GET path on base until it answers want; it reports how
// long that took, failing after limit.
func waitStatus(t *testing.T, base, path, token string, want int, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		a := get(t, base, path, token)
		if a.status == want {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("GET %s on %s: %d after %v, want %d", path, base, a.status, limit, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A token revoked on one replica, and a member removed on one, are refused
// by the other at once, although it cached them for ten minutes.
func TestReplicasRevokeAtOnce(t *testing.T) {
	a, b := replicasWith(t, servertest.Options{CacheTTL: 10 * time.Minute})
	owner := a.NewUser("owner@example.com")
	member := a.AddMember(owner.Workspace, "member@example.com", "member")
	path := "/api/workspaces/" + owner.Workspace
	// Both credentials are cached on b (its listener up first).
	waitStatus(t, b.URL, path, owner.Token, 200, 10*time.Second)
	waitStatus(t, b.URL, path, member.Token, 200, 10*time.Second)
	for i := 0; i < 3; i++ {
		if s := get(t, b.URL, path, member.Token).status; s != 200 {
			t.Fatalf("member before removal: %d", s)
		}
	}

	if r := post(t, a.URL, "/api/auth/logout", owner.Token, `{}`); r.status != 200 {
		t.Fatalf("logout on a: %d %v", r.status, r.body)
	}
	took := waitStatus(t, b.URL, path, owner.Token, 401, 2*time.Second)
	t.Logf("the revoked token was refused by the other replica after %v", took)

	admin := a.AddMember(owner.Workspace, "admin@example.com", "admin")
	req, _ := http.NewRequest(http.MethodDelete, a.URL+path+"/members/"+fmt.Sprint(member.ID), nil)
	req.Header.Set("Authorization", "Bearer "+admin.Token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode/100 != 2 {
		t.Fatalf("remove member on a: %d", res.StatusCode)
	}
	took = waitStatus(t, b.URL, path, member.Token, 403, 2*time.Second)
	t.Logf("the removed member was refused by the other replica after %v", took)
}

// The runtime routes' rate is one budget across replicas: requests spread
// over two replicas get what one would give, not twice.
func TestReplicasShareTheRuntimeThrottle(t *testing.T) {
	const rate = 1.0 // burst 2
	a, b := replicasWith(t, servertest.Options{RuntimeRate: rate})
	u := a.NewUser("rt@example.com")
	in, err := u.Client.CreateInstall(context.Background(), u.Workspace, "m")
	if err != nil {
		t.Fatal(err)
	}
	path := "/api/workspaces/" + u.Workspace + "/installs/" + in.ID + "/heartbeat"
	start := time.Now()
	ok, limited := 0, 0
	for i := 0; i < 16; i++ {
		base := []string{a.URL, b.URL}[i%2]
		switch r := post(t, base, path, in.IssueToken, `{}`); r.status {
		case 200:
			ok++
		case 429:
			limited++
		default:
			t.Fatalf("heartbeat: %d %v", r.status, r.body)
		}
	}
	elapsed := time.Since(start).Seconds()
	// The burst, plus what refilled meanwhile; two replicas keeping
	// their own buckets would allow twice the burst at least.
	if bound := 2 + int(elapsed*rate); ok > bound || limited == 0 {
		t.Fatalf("%d allowed, %d refused in %.2fs: more than the shared %d", ok, limited, elapsed, bound)
	}
}

// A machine whose daemon is connected to one replica's relay is online on
// the pages of the other.
func TestReplicasShareOnlineStatus(t *testing.T) {
	a, b := replicasWith(t, servertest.Options{})
	u := a.NewUser("online@example.com")
	ctx := context.Background()
	in, err := u.Client.CreateInstall(ctx, u.Workspace, "m")
	if err != nil {
		t.Fatal(err)
	}
	if a.Host.Online(u.Workspace, in.ID) || b.Host.Online(u.Workspace, in.ID) {
		t.Fatal("online before the daemon connected")
	}
	tok, err := a.Client(in.IssueToken).RuntimeRelayToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	url, err := sdk.RelayWSURL(a.URL, "workspace-daemon", u.Workspace, in.ID)
	if err != nil {
		t.Fatal(err)
	}
	d, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tok.Token}}})
	if err != nil {
		t.Fatal(err)
	}
	waitOnline := func(s *servertest.Server, want bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for s.Host.Online(u.Workspace, in.ID) != want {
			if time.Now().After(deadline) {
				t.Fatalf("online on %s never became %v", s.URL, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitOnline(b, true)
	waitOnline(a, true)
	d.Close(websocket.StatusNormalClosure, "")
	waitOnline(b, false)
}
