package store

import (
	"context"
	"testing"
	"time"
)

// Per runtime target the newest daemon connection wins, on whichever
// instance reports it; a removal only removes the instance's own entry;
// expired entries and dead instances resolve to nothing.
func TestRelayPresence(t *testing.T) { eachEngine(t, testRelayPresence) }

func testRelayPresence(t *testing.T, e engine) {
	ctx := context.Background()
	a := e.open(t)
	b := a
	if e.name == EnginePostgres {
		b = e.open(t)
	}
	now := time.Unix(1_800_000_000, 0)
	exp := now.Add(30 * time.Second)
	alive := now.Add(-time.Minute)
	p1 := RelayPresence{WorkspaceID: "ws", RuntimeTargetID: "m1", ConnID: "c1", ConnectedAt: now.Add(-10 * time.Second)}
	rep, err := a.ReportPresence(ctx, "inst-a", []RelayPresence{p1}, nil, exp, now)
	if err != nil || rep.Accepted != 1 || len(rep.Superseded)+len(rep.Replaced) != 0 {
		t.Fatalf("first report: %+v %v", rep, err)
	}
	got, ok, err := b.ResolvePresence(ctx, "ws", "m1", now, alive)
	if err != nil || !ok || got.InstanceID != "inst-a" || got.ConnID != "c1" || !got.ConnectedAt.Equal(p1.ConnectedAt) || !got.ExpiresAt.Equal(exp) {
		t.Fatalf("resolve: %+v %v %v", got, ok, err)
	}
	// A newer connection on another instance replaces it.
	p2 := RelayPresence{WorkspaceID: "ws", RuntimeTargetID: "m1", ConnID: "c2", ConnectedAt: now.Add(-time.Second)}
	rep, err = b.ReportPresence(ctx, "inst-b", []RelayPresence{p2}, nil, exp, now)
	if err != nil || rep.Accepted != 1 || len(rep.Replaced) != 1 || rep.Replaced[0].InstanceID != "inst-a" || rep.Replaced[0].ConnID != "c1" {
		t.Fatalf("newer report: %+v %v", rep, err)
	}
	// The older one still reporting is superseded, and changes nothing.
	rep, err = a.ReportPresence(ctx, "inst-a", []RelayPresence{p1}, nil, exp, now)
	if err != nil || rep.Accepted != 0 || len(rep.Superseded) != 1 || rep.Superseded[0].ConnID != "c1" {
		t.Fatalf("older report: %+v %v", rep, err)
	}
	// inst-a removing its old connection leaves inst-b's.
	if _, err := a.ReportPresence(ctx, "inst-a", nil, []RelayPresence{p1}, exp, now); err != nil {
		t.Fatal(err)
	}
	if got, ok, _ := a.ResolvePresence(ctx, "ws", "m1", now, alive); !ok || got.ConnID != "c2" {
		t.Fatalf("after another instance's removal: %+v %v", got, ok)
	}
	// Expiry, and an instance not seen since aliveSince.
	if _, ok, _ := a.ResolvePresence(ctx, "ws", "m1", exp, alive); ok {
		t.Fatal("an expired entry resolved")
	}
	if _, ok, _ := a.ResolvePresence(ctx, "ws", "m1", now, now.Add(time.Second)); ok {
		t.Fatal("the entry of a dead instance resolved")
	}
	// Its own removal removes it; an unknown target resolves to nothing.
	if _, err := b.ReportPresence(ctx, "inst-b", nil, []RelayPresence{p2}, exp, now); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"m1", "m2"} {
		if _, ok, err := a.ResolvePresence(ctx, "ws", target, now, alive); ok || err != nil {
			t.Fatalf("%s resolved: %v", target, err)
		}
	}
	// A report after expiry takes the target over whatever its age.
	old := RelayPresence{WorkspaceID: "ws", RuntimeTargetID: "m3", ConnID: "new", ConnectedAt: now}
	if _, err := a.ReportPresence(ctx, "inst-a", []RelayPresence{old}, nil, exp, now); err != nil {
		t.Fatal(err)
	}
	older := RelayPresence{WorkspaceID: "ws", RuntimeTargetID: "m3", ConnID: "old", ConnectedAt: now.Add(-time.Hour)}
	if rep, err := b.ReportPresence(ctx, "inst-b", []RelayPresence{older}, nil, exp.Add(time.Minute), exp.Add(time.Second)); err != nil || rep.Accepted != 1 {
		t.Fatalf("report over an expired entry: %+v %v", rep, err)
	}
}
