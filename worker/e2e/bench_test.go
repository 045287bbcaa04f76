package e2e

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
)

// BenchmarkRunThroughWorker is the cost of a run taken by a worker: from
// queueing it on the control plane to its reported success, with the
// shell agent (so the figure is the worker's and the daemon's overhead,
// not a model's). Compare BenchmarkRunThroughDaemon, the same prompt
// through `reeve run --wait` on the same kind of machine: the difference
// is the lease cycle (claim, state, heartbeat, evidence, completion).
func BenchmarkRunThroughWorker(b *testing.B) {
	p, m, repo, cred := benchSetup(b)
	m.startWorker("bench", "--server", p.srv.URL, "--credential-file", cred, "--workdir", repo, "--agents", "shell")
	var lat []time.Duration
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		r, err := p.owner.Client.CreateWorkflowRun(ctxT(b), p.owner.Workspace, sdk.WorkflowRunCreateRequest{Agent: "shell", Prompt: fmt.Sprintf("echo %d > b-%d.txt", i, i), Workdir: "app"})
		if err != nil {
			b.Fatal(err)
		}
		for {
			got, err := p.owner.Client.GetWorkflowRun(ctxT(b), p.owner.Workspace, r.ID)
			if err != nil {
				b.Fatal(err)
			}
			if sdk.RunTerminal(got.Status) {
				if got.Status != sdk.RunSucceeded {
					b.Fatalf("run %+v", got)
				}
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	report(b, lat)
}

func BenchmarkRunThroughDaemon(b *testing.B) {
	_, m, repo, _ := benchSetup(b)
	var lat []time.Duration
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		r := m.run("run", repo, "--agent", "shell", "--prompt", fmt.Sprintf("echo %d > d-%d.txt", i, i), "--wait")
		if r.code != 0 {
			b.Fatalf("reeve run: %d %s", r.code, r.stderr)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	report(b, lat)
}

func report(b *testing.B, lat []time.Duration) {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) == 0 {
		return
	}
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Milliseconds()), "p99-ms")
}

func benchSetup(b *testing.B) (*plane, *machine, string, string) {
	b.Helper()
	p := newPlane(b, servertest.Options{})
	_, cred := p.executor(p.owner, "bench", nil, nil)
	return p, newMachine(b, nil), gitRepo(b, "app"), cred
}
