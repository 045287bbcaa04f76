package runtime

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/runtime/runtimetest"
	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/daemon/wire"
)

func code(err error) string {
	if se, ok := err.(*SessionError); ok {
		return se.Code
	}
	return ""
}

// While a worktree operation holds a session's slot, a prompt, a kill and
// another operation are refused, each saying what holds it; of many
// racing for a free slot, exactly one gets it.
func TestOperationHoldsTheSlot(t *testing.T) {
	ctx := context.Background()
	dir := home.Dir(t.TempDir())
	st, err := store.Open(ctx, store.Options{Path: filepath.Join(string(dir), "reeve.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	d, _, _ := st.AddDirectory(ctx, t.TempDir())
	agent := &runtimetest.Adapter{}
	m, err := NewManager(ctx, ManagerOptions{Store: st, Home: dir, Agents: &runtimetest.Registry{Adapters: []agents.Adapter{agent}}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	si, err := m.Launch(ctx, wire.LaunchRequest{Directory: d.ID, Prompt: "p"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, busy := m.running(si.ID); !busy {
			break
		}
	}
	release, err := m.hold(si.ID, "squash")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Prompt(ctx, wire.PromptRequest{SessionID: si.ID, Text: "more"}); code(err) != wire.CodeBusy {
		t.Fatalf("prompt during an operation: %v", err)
	}
	if err := m.Kill(ctx, wire.KillRequest{SessionID: si.ID}); code(err) != wire.CodeBusy || !strings.Contains(err.Error(), "squash") {
		t.Fatalf("kill during an operation: %v", err)
	}
	if _, err := m.hold(si.ID, "roll back"); code(err) != wire.CodeBusy || !strings.Contains(err.Error(), "another worktree operation (squash)") {
		t.Fatalf("second operation: %v", err)
	}
	release()
	release() // a second release frees nothing it does not hold

	var got atomic.Int32
	var wg sync.WaitGroup
	var held []func()
	var mu sync.Mutex
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r, err := m.hold(si.ID, "op"); err == nil {
				got.Add(1)
				mu.Lock()
				held = append(held, r)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if got.Load() != 1 {
		t.Fatalf("%d holders of one slot", got.Load())
	}
	held[0]()
	if _, busy := m.running(si.ID); busy {
		t.Fatal("the slot is still taken after its release")
	}
}
