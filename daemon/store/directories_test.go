package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
)

// A directory with active sessions cannot be removed; once they have
// ended it can. Racing 100 removes against 100 session starts never leaves
// an active session whose directory is gone.
func TestRemoveDirectoryRefusedWhileActive(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	d := newDir(t, s, "/work/a")
	sess, err := s.CreateSession(ctx, NewSession{DirectoryID: d.ID, Agent: "shell", Status: StatusIdle})
	if err != nil {
		t.Fatal(err)
	}
	err = s.RemoveDirectory(ctx, d.ID)
	var inUse *InUseError
	if !errors.As(err, &inUse) || !errors.Is(err, ErrInUse) || fmt.Sprint(inUse.Sessions) != fmt.Sprint([]string{sess.ID}) {
		t.Fatalf("remove with an idle session: %v", err)
	}
	if _, err := s.UpdateSessionStatus(ctx, sess.ID, StatusCompleted, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveDirectory(ctx, d.ID); err != nil {
		t.Fatalf("remove after the session ended: %v", err)
	}
	if err := s.RemoveDirectory(ctx, d.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second remove: %v", err)
	}

	for round := 0; round < 5; round++ {
		d := newDir(t, s, fmt.Sprintf("/work/race%d", round))
		var wg sync.WaitGroup
		for i := 0; i < 100; i++ {
			wg.Add(2)
			go func() {
				defer wg.Done()
				s.CreateSession(ctx, NewSession{DirectoryID: d.ID, Agent: "shell", Status: StatusRunning})
			}()
			go func() {
				defer wg.Done()
				s.RemoveDirectory(ctx, d.ID)
			}()
		}
		wg.Wait()
		active, err := s.ListSessions(ctx, SessionFilter{DirectoryID: d.ID, Statuses: ActiveStatuses})
		if err != nil {
			t.Fatal(err)
		}
		_, dirErr := s.Directory(ctx, d.ID)
		if len(active) > 0 && dirErr != nil {
			t.Fatalf("round %d: %d active sessions of a removed directory", round, len(active))
		}
		if len(active) == 0 && dirErr == nil {
			t.Fatalf("round %d: no session started, yet every remove was refused", round)
		}
	}
}
