package runtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/runtime"
	"reeve.dev/reeve/daemon/runtime/runtimetest"
	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/hookbridge"
	"reeve.dev/reeve/hookbridge/hookprog"
	"reeve.dev/reeve/hookbridge/policy"
)

// governedSession launches a governed session against the real store and
// policy, and returns its manager, id and the hook of its turn.
func governedSession(tb testing.TB, ctx context.Context) (*runtime.Manager, string, *agents.Hook) {
	tb.Helper()
	dir := tb.TempDir()
	os.MkdirAll(filepath.Join(dir, ".reeve"), 0o755)
	os.WriteFile(filepath.Join(dir, ".reeve", "policy.yaml"), []byte("version: 1\ndeny:\n  - name: no-rm\n    tools: [Bash]\n    commands: [\"rm *\"]\nallow:\n  - name: builds\n    tools: [Bash]\n    commands: [\"go *\"]\n"), 0o644)
	h := home.Dir(tb.TempDir())
	st, err := store.Open(ctx, store.Options{Path: filepath.Join(string(h), "reeve.db")})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	d, _, err := st.AddDirectory(ctx, dir)
	if err != nil {
		tb.Fatal(err)
	}
	src := filepath.Join(tb.TempDir(), "reeve")
	os.WriteFile(src, []byte("#!/bin/sh\n"), 0o755)
	prog, err := hookprog.InstallFrom(string(h), src)
	if err != nil {
		tb.Fatal(err)
	}
	hooks := make(chan *agents.Hook, 1)
	adapter := &runtimetest.Adapter{StartTurnFunc: func(_ context.Context, t agents.Turn, _ agents.Emit) (agents.Process, error) {
		hooks <- t.Hook
		return runtimetest.NewProcess(), nil
	}}
	m, err := runtime.NewManager(ctx, runtime.ManagerOptions{Store: st, Home: h, HookProgram: prog,
		Agents: &runtimetest.Registry{Adapters: []agents.Adapter{adapter}},
		Policy: func(src policy.Source, req policy.Request) hookbridge.PolicyVerdict {
			v := src.Decide(req)
			return hookbridge.PolicyVerdict{Action: string(v.Action), Rule: v.Rule, Reason: v.Reason}
		}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close() })
	info, err := m.Launch(ctx, wire.LaunchRequest{Directory: d.ID, Prompt: "bench"})
	if err != nil {
		tb.Fatal(err)
	}
	select {
	case hook := <-hooks:
		return m, info.ID, hook
	case <-time.After(60 * time.Second):
		tb.Fatal("the turn never started")
		return nil, "", nil
	}
}

// BenchmarkDecisionsAfterPrior is the rate of policy-allowed in-band
// decisions in a session that already holds 10 or 1000 decisions. Each
// decision is one appended event (the manifest's approvals are a view of
// those events), so the rate must not fall with the prior count; it did
// when every decision rewrote a manifest holding all earlier approvals.
func BenchmarkDecisionsAfterPrior(b *testing.B) {
	input := json.RawMessage(`{"command":"go test ./..."}`)
	for _, prior := range []int{10, 1000} {
		b.Run(fmt.Sprintf("prior-%d", prior), func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			_, _, hook := governedSession(b, ctx)
			decide := func(id string) {
				if v := hook.Decide(ctx, agents.ToolUse{ToolUseID: id, Tool: "Bash", Input: input, Channel: "can_use_tool"}); !v.Allow {
					b.Fatalf("verdict %+v", v)
				}
			}
			for i := 0; i < prior; i++ {
				decide(fmt.Sprintf("p%d", i))
			}
			b.ResetTimer()
			t0 := time.Now()
			for i := 0; i < b.N; i++ {
				decide(fmt.Sprintf("b%d", i))
			}
			b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "decisions/s")
		})
	}
}

// The manifest's approvals are the session's decisions, in order, with
// what each decided, however many there are; a decision no longer
// touches the manifest.
func TestApprovalsAreTheDecisionEvents(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, id, hook := governedSession(t, ctx)
	const n = 1203 // more than one page of events
	for i := 0; i < n; i++ {
		cmd := "go test ./..."
		if i%2 == 1 {
			cmd = "rm -rf x"
		}
		hook.Decide(ctx, agents.ToolUse{ToolUseID: fmt.Sprintf("t%d", i), Tool: "Bash", Input: json.RawMessage(fmt.Sprintf(`{"command":%q}`, cmd)), Channel: "can_use_tool"})
	}
	mf, err := m.Manifest(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(mf.Approvals) != n {
		t.Fatalf("%d approvals, want %d", len(mf.Approvals), n)
	}
	for i, a := range mf.Approvals {
		want := hookbridge.Allow
		if i%2 == 1 {
			want = hookbridge.Deny
		}
		if a.ToolUseID != fmt.Sprintf("t%d", i) || a.Decision != want || a.Command == "" || a.Channel != "can_use_tool" {
			t.Fatalf("approval %d: %+v", i, a)
		}
	}
}

// 100 decisions racing in one session: each is on the record once, and
// the approvals view lists every one exactly once.
func TestConcurrentDecisionsAllInApprovals(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, id, hook := governedSession(t, ctx)
	const n = 100
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			hook.Decide(ctx, agents.ToolUse{ToolUseID: fmt.Sprintf("r%d", i), Tool: "Bash", Input: json.RawMessage(`{"command":"go vet"}`), Channel: "item/commandExecution/requestApproval"})
		}(i)
	}
	wg.Wait()
	mf, err := m.Manifest(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, a := range mf.Approvals {
		seen[a.ToolUseID]++
	}
	if len(mf.Approvals) != n || len(seen) != n {
		t.Fatalf("%d approvals for %d distinct calls, want %d", len(mf.Approvals), len(seen), n)
	}
}
