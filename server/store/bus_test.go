package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// Messages reach their instance in publish order, from any replica; a pull
// whose answer was lost is answered again until acknowledged; a dead or
// unknown instance and a full inbox are refused per message; pruning
// forgets dead instances with their messages.
func TestRelayBus(t *testing.T) { eachEngine(t, testRelayBus) }

func testRelayBus(t *testing.T, e engine) {
	ctx := context.Background()
	a := e.open(t)
	b := a
	if e.name == EnginePostgres {
		b = e.open(t)
	}
	now := time.Unix(1_800_000_000, 0)
	for _, id := range []string{"inst-a", "inst-b"} {
		if err := a.TouchRelayInstance(ctx, id, now); err != nil {
			t.Fatal(err)
		}
	}
	var msgs []BusMessage
	for i := 0; i < 10; i++ {
		msgs = append(msgs, BusMessage{To: "inst-b", Body: []byte(fmt.Sprintf(`{"n":%d}`, i))})
	}
	msgs = append(msgs, BusMessage{To: "nobody", Body: []byte(`{}`)})
	refused, err := a.PublishBus(ctx, msgs[:5], 8, now.Add(-time.Minute), now)
	if err != nil || len(refused) != 5 {
		t.Fatal(refused, err)
	}
	refused, err = b.PublishBus(ctx, msgs[5:], 8, now.Add(-time.Minute), now)
	if err != nil {
		t.Fatal(err)
	}
	// 5 queued before; 3 more fit the inbox of 8; the unknown instance is refused.
	for i, r := range refused {
		var want error
		switch {
		case i == 5:
			want = ErrUnknownInstance
		case i >= 3:
			want = ErrInboxFull
		}
		if !errors.Is(r, want) {
			t.Fatalf("message %d: refused %v, want %v", 5+i, r, want)
		}
	}
	got, err := b.PullBus(ctx, "inst-b", 0, 5)
	if err != nil || len(got) != 5 {
		t.Fatalf("pull: %d %v", len(got), err)
	}
	// The answer is lost: the same pull gets the same messages.
	again, err := a.PullBus(ctx, "inst-b", 0, 100)
	if err != nil || len(again) != 8 || again[0].Seq != got[0].Seq {
		t.Fatalf("pull again: %d %v", len(again), err)
	}
	for i, m := range again {
		if string(m.Body) != fmt.Sprintf(`{"n":%d}`, i) || (i > 0 && m.Seq <= again[i-1].Seq) {
			t.Fatalf("message %d out of order: %s seq %d", i, m.Body, m.Seq)
		}
	}
	rest, err := a.PullBus(ctx, "inst-b", got[4].Seq, 100)
	if err != nil || len(rest) != 3 || string(rest[0].Body) != `{"n":5}` {
		t.Fatalf("after acknowledging 5: %d %v", len(rest), err)
	}
	if none, err := a.PullBus(ctx, "inst-b", rest[2].Seq, 100); err != nil || len(none) != 0 {
		t.Fatalf("after acknowledging all: %d %v", len(none), err)
	}
	// An instance not seen since aliveSince is gone.
	refused, err = a.PublishBus(ctx, []BusMessage{{To: "inst-a", Body: []byte(`{}`)}}, 8, now.Add(time.Second), now)
	if err != nil || !errors.Is(refused[0], ErrUnknownInstance) {
		t.Fatalf("a stale instance: %v %v", refused, err)
	}
	if _, err := a.PublishBus(ctx, []BusMessage{{To: "inst-a", Body: []byte(`{}`)}}, 8, now.Add(-time.Second), now); err != nil {
		t.Fatal(err)
	}
	if err := a.TouchRelayInstance(ctx, "inst-b", now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	// An expired presence of a live instance goes too.
	if _, err := a.ReportPresence(ctx, "inst-b", []RelayPresence{{WorkspaceID: "w", RuntimeTargetID: "t", ConnID: "c", ConnectedAt: now}}, nil, now.Add(30*time.Second), now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n, err := a.PruneRelay(ctx, now.Add(time.Minute)); err != nil || n != 2 {
		t.Fatalf("prune: %d %v", n, err)
	}
	if _, ok, _ := a.ResolvePresence(ctx, "w", "t", now, now.Add(-time.Hour)); ok {
		t.Fatal("a pruned presence resolved")
	}
	if left, _ := a.PullBus(ctx, "inst-a", 0, 10); len(left) != 0 {
		t.Fatalf("a pruned instance's messages stayed: %d", len(left))
	}
}

// A notice reaches every listener of its channel, from any replica, after
// the listener reports itself up; BumpGeneration notifies too.
func TestNotices(t *testing.T) { eachEngine(t, testNotices) }

func testNotices(t *testing.T, e engine) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := e.open(t)
	b := a
	if e.name == EnginePostgres {
		b = e.open(t)
	}
	type got struct{ ch, payload string }
	notices := make(chan got, 16)
	up := make(chan bool, 4)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		b.Listen(ctx, Listener{Notice: func(ch, p string) { notices <- got{ch, p} }, Up: func(u bool) { up <- u }}, NoticeRelayBus, NoticeGeneration)
	}()
	select {
	case u := <-up:
		if !u {
			t.Fatal("listener down first")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("listener never up")
	}
	if err := a.Notify(ctx, NoticeRelayBus, "inst-1"); err != nil {
		t.Fatal(err)
	}
	if err := a.Notify(ctx, "other_channel", "x"); err != nil {
		t.Fatal(err)
	}
	g1, err := a.BumpGeneration(ctx, "credentials")
	if err != nil {
		t.Fatal(err)
	}
	g2, err := a.BumpGeneration(ctx, "credentials")
	if err != nil || g2 != g1+1 {
		t.Fatalf("bump: %d then %d %v", g1, g2, err)
	}
	if g, err := b.Generation(ctx, "credentials"); err != nil || g != g2 {
		t.Fatalf("generation: %d %v", g, err)
	}
	if g, err := b.Generation(ctx, "never"); err != nil || g != 0 {
		t.Fatalf("an unbumped generation: %d %v", g, err)
	}
	want := []got{{NoticeRelayBus, "inst-1"}, {NoticeGeneration, "credentials"}, {NoticeGeneration, "credentials"}}
	for _, w := range want {
		select {
		case n := <-notices:
			if n != w {
				t.Fatalf("notice %v, want %v", n, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("notice %v never came", w)
		}
	}
	select {
	case n := <-notices:
		t.Fatalf("an unexpected notice: %v", n)
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	wg.Wait()
}
