package store

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// terminateOthers ends every other connection to the test's database, as
// a database restart or a network cut would.
func terminateOthers(t *testing.T, url string) {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no connection to terminate")
	}
}

// Connections the database drops are survived: a write whose connection
// was lost before its commit is run again on a new one (safe: nothing was
// committed), and a listener reports itself down, reconnects, reports
// itself up and receives notices again.
func TestLostConnectionsAreSurvived(t *testing.T) {
	e := postgresEngine(t)
	s := e.open(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	now := time.Unix(1_800_000_000, 0)
	if _, err := s.TakeBucket(ctx, "n", "k", 1, 100, 1, now); err != nil {
		t.Fatal(err)
	}
	notices := make(chan string, 16)
	ups := make(chan bool, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Listen(ctx, Listener{Notice: func(_, p string) { notices <- p }, Up: func(u bool) { ups <- u }}, NoticeRelayBus)
	}()
	expectUp := func(want bool) {
		t.Helper()
		select {
		case u := <-ups:
			if u != want {
				t.Fatalf("listener up=%v, want %v", u, want)
			}
		case <-ctx.Done():
			t.Fatalf("listener never reported up=%v", want)
		}
	}
	expectUp(true)

	terminateOthers(t, e.url)
	// The pool's connections are gone; the write still happens, once.
	if held, err := s.TakeBucket(ctx, "n", "k", 1, 100, 1, now); err != nil || held != 99 {
		t.Fatalf("write after the connections were dropped: %v %v", held, err)
	}
	if held, err := s.TakeBucket(ctx, "n", "k", 1, 100, 0, now); err != nil || held != 98 {
		t.Fatalf("the retried write counted %v times: %v", 100-held, err)
	}
	expectUp(false)
	expectUp(true)
	if err := s.Notify(ctx, NoticeRelayBus, "after"); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-notices:
		if p != "after" {
			t.Fatalf("notice %q", p)
		}
	case <-ctx.Done():
		t.Fatal("no notice after the listener reconnected")
	}
	cancel()
	<-done
}
