package runtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
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

// BenchmarkDecisionLatency is the decision latency reeve adds to a tool
// call when the project policy allows it and no human is asked: the
// in-band Decide of a governed turn (policy read and evaluated from the
// real policy file, decision appended to the SQLite log, approval added to
// the manifest). The baseline in the same run is the policy evaluation
// alone, which every decision needs. p50 and p99 are reported per op.
func BenchmarkDecisionLatency(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := b.TempDir()
	os.MkdirAll(filepath.Join(dir, ".reeve"), 0o755)
	os.WriteFile(filepath.Join(dir, ".reeve", "policy.yaml"), []byte(`version: 1
deny:
  - name: no-rm
    tools: [Bash]
    commands: ["rm *"]
allow:
  - name: builds
    tools: [Bash]
    commands: ["go *", "make *", "ls*"]
`), 0o644)
	h := home.Dir(b.TempDir())
	st, err := store.Open(ctx, store.Options{Path: filepath.Join(string(h), "reeve.db")})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	d, _, err := st.AddDirectory(ctx, dir)
	if err != nil {
		b.Fatal(err)
	}
	src := filepath.Join(b.TempDir(), "reeve")
	os.WriteFile(src, []byte("#!/bin/sh\n"), 0o755)
	prog, err := hookprog.InstallFrom(string(h), src)
	if err != nil {
		b.Fatal(err)
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
		b.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Launch(ctx, wire.LaunchRequest{Directory: d.ID, Prompt: "bench"}); err != nil {
		b.Fatal(err)
	}
	hook := <-hooks
	input := json.RawMessage(`{"command":"go test ./..."}`)

	b.Run("baseline-policy-only", func(b *testing.B) {
		s := policy.Source{Project: dir, Required: true}
		lat := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			if v := s.Decide(policy.Request{Tool: "Bash", Input: input, Workdir: dir}); v.Action != policy.Allow {
				b.Fatalf("policy %+v", v)
			}
			lat = append(lat, time.Since(t0))
		}
		report(b, lat)
	})
	b.Run("in-band-decide-policy-allow", func(b *testing.B) {
		lat := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			v := hook.Decide(ctx, agents.ToolUse{ToolUseID: fmt.Sprintf("b%d", i), Tool: "Bash", Input: input, Channel: "can_use_tool"})
			lat = append(lat, time.Since(t0))
			if !v.Allow {
				b.Fatalf("verdict %+v", v)
			}
		}
		report(b, lat)
	})
}

func report(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
}
