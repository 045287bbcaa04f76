package store

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
)

func newDir(t testing.TB, s *Store, path string) Directory {
	t.Helper()
	d, _, err := s.AddDirectory(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func newSession(t testing.TB, s *Store) Session {
	t.Helper()
	d := newDir(t, s, "/work/repo")
	sess, err := s.CreateSession(context.Background(), NewSession{DirectoryID: d.ID, Agent: "shell", Prompt: "echo hi"})
	if err != nil {
		t.Fatal(err)
	}
	return sess
}

func TestSessionsCRUD(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	d1 := newDir(t, s, "/work/one")
	d2 := newDir(t, s, "/work/two")

	if _, err := s.CreateSession(ctx, NewSession{DirectoryID: "01MISSING", Agent: "shell"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown directory: %v", err)
	}
	if _, err := s.CreateSession(ctx, NewSession{DirectoryID: d1.ID}); err == nil {
		t.Fatal("session without agent accepted")
	}
	if _, err := s.CreateSession(ctx, NewSession{DirectoryID: d1.ID, Agent: "x", Manifest: json.RawMessage(`[1]`)}); err == nil {
		t.Fatal("non-object manifest accepted")
	}

	a, err := s.CreateSession(ctx, NewSession{DirectoryID: d1.ID, Agent: "claude", Model: "opus", Prompt: "fix it",
		Worktree: "/wt/a", Workdir: "/wt/a/sub", Manifest: json.RawMessage(`{"unguarded":true}`)})
	if err != nil {
		t.Fatal(err)
	}
	if a.Status != StatusStarting || len(a.ID) != 26 || a.CreatedAt.IsZero() || !a.EndedAt.IsZero() ||
		a.Model != "opus" || a.Worktree != "/wt/a" || a.Workdir != "/wt/a/sub" || string(a.Manifest) != `{"unguarded":true}` {
		t.Fatalf("created %+v", a)
	}
	b, err := s.CreateSession(ctx, NewSession{ID: "preset-id", DirectoryID: d2.ID, Agent: "codex"})
	if err != nil || b.ID != "preset-id" || string(b.Manifest) != `{}` {
		t.Fatalf("preset id: %+v %v", b, err)
	}
	if _, err := s.CreateSession(ctx, NewSession{ID: "preset-id", DirectoryID: d2.ID, Agent: "codex"}); err == nil {
		t.Fatal("duplicate id accepted")
	}

	got, err := s.Session(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(a)
	jg, _ := json.Marshal(got)
	if string(ja) != string(jg) {
		t.Fatalf("read back\n%s\nwant\n%s", jg, ja)
	}
	if _, err := s.Session(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown session: %v", err)
	}

	ids := func(f SessionFilter) []string {
		t.Helper()
		list, err := s.ListSessions(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, x := range list {
			out = append(out, x.ID)
		}
		return out
	}
	if got := ids(SessionFilter{}); !slices.Equal(got, []string{a.ID, b.ID}) {
		t.Fatalf("list all = %v", got)
	}
	if got := ids(SessionFilter{DirectoryID: d2.ID}); !slices.Equal(got, []string{b.ID}) {
		t.Fatalf("list by directory = %v", got)
	}
	if got := ids(SessionFilter{Agent: "claude"}); !slices.Equal(got, []string{a.ID}) {
		t.Fatalf("list by agent = %v", got)
	}

	up, err := s.UpdateSessionStatus(ctx, a.ID, StatusCompleted, "exit 0")
	if err != nil || up.Status != StatusCompleted || up.StatusReason != "exit 0" || up.EndedAt.IsZero() {
		t.Fatalf("complete: %+v %v", up, err)
	}
	if got := ids(SessionFilter{Statuses: ActiveStatuses}); !slices.Equal(got, []string{b.ID}) {
		t.Fatalf("list active = %v", got)
	}
	if got := ids(SessionFilter{Statuses: TerminalStatuses, Agent: "claude"}); !slices.Equal(got, []string{a.ID}) {
		t.Fatalf("list terminal claude = %v", got)
	}
	// A resumed session leaves the terminal state and loses its end time.
	up, err = s.UpdateSessionStatus(ctx, a.ID, StatusRunning, "")
	if err != nil || up.Status != StatusRunning || !up.EndedAt.IsZero() {
		t.Fatalf("resume: %+v %v", up, err)
	}
	if _, err := s.UpdateSessionStatus(ctx, a.ID, "bogus", ""); err == nil {
		t.Fatal("bogus status accepted")
	}
	if _, err := s.UpdateSessionStatus(ctx, "nope", StatusRunning, ""); !errors.Is(err, ErrNotFound) {
		t.Fatalf("update unknown: %v", err)
	}

	if err := s.SetManifest(ctx, b.ID, json.RawMessage(`{"provider":"openai"}`)); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Session(ctx, b.ID); string(got.Manifest) != `{"provider":"openai"}` {
		t.Fatalf("manifest = %s", got.Manifest)
	}
	if err := s.SetManifest(ctx, b.ID, json.RawMessage(`nope`)); err == nil {
		t.Fatal("invalid manifest accepted")
	}
	if err := s.SetManifest(ctx, "nope", nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("manifest of unknown: %v", err)
	}
	// Removing the directory keeps its sessions: they are history. (It
	// waits for them to end: TestRemoveDirectoryRefusedWhileActive.)
	if _, err := s.UpdateSessionStatus(ctx, b.ID, StatusCompleted, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveDirectory(ctx, d2.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Session(ctx, b.ID); err != nil {
		t.Fatalf("session lost with its directory: %v", err)
	}
}

func TestMarkRunningInterrupted(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	d := newDir(t, s, "/work/r")
	want := map[string]bool{}
	var done string
	for _, st := range append(append([]Status{}, ActiveStatuses...), TerminalStatuses...) {
		sess, err := s.CreateSession(ctx, NewSession{DirectoryID: d.ID, Agent: "shell", Status: st})
		if err != nil {
			t.Fatal(err)
		}
		if st.Active() {
			want[sess.ID] = true
		}
		if st == StatusCompleted {
			done = sess.ID
		}
	}
	// A follower of an active session must be woken by the change.
	var active string
	for id := range want {
		active = id
		break
	}
	signal, cancel := s.Watch(active)
	defer cancel()

	ids, err := s.MarkRunningInterrupted(ctx, "worker restarted after a crash")
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != len(want) {
		t.Fatalf("interrupted %v, want %d sessions", ids, len(want))
	}
	for _, id := range ids {
		if !want[id] {
			t.Fatalf("interrupted %s which was not active", id)
		}
		sess, _ := s.Session(ctx, id)
		if sess.Status != StatusInterrupted || sess.StatusReason != "worker restarted after a crash" || sess.EndedAt.IsZero() {
			t.Fatalf("after mark: %+v", sess)
		}
	}
	select {
	case <-signal:
	default:
		t.Fatal("watcher of an interrupted session was not signalled")
	}
	if sess, _ := s.Session(ctx, done); sess.Status != StatusCompleted {
		t.Fatalf("completed session changed to %s", sess.Status)
	}
	if n, _ := s.CountActiveSessions(ctx); n != 0 {
		t.Fatalf("%d active after mark", n)
	}
	again, err := s.MarkRunningInterrupted(ctx, "again")
	if err != nil || len(again) != 0 {
		t.Fatalf("second mark: %v %v", again, err)
	}
}
