// Package runtimetest holds func-field fakes of what the session manager
// (daemon/runtime) drives: agent adapters, their processes and the agent
// registry, so that tests can script a turn event by event.
package runtimetest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"reeve.dev/reeve/agents"
)

// Adapter is an agents.Adapter whose behaviour is its func fields. A nil
// DescribeFunc describes an installed, structured, resumable agent; a nil
// StartTurnFunc starts a Turn that ends at once.
type Adapter struct {
	IDValue       string
	DescribeFunc  func(ctx context.Context) agents.Info
	StartTurnFunc func(ctx context.Context, t agents.Turn, emit agents.Emit) (agents.Process, error)
}

var _ agents.Adapter = (*Adapter)(nil)

// ID implements agents.Adapter.
func (a *Adapter) ID() string {
	if a.IDValue == "" {
		return "fake"
	}
	return a.IDValue
}

// Describe implements agents.Adapter.
func (a *Adapter) Describe(ctx context.Context) agents.Info {
	if a.DescribeFunc != nil {
		return a.DescribeFunc(ctx)
	}
	return agents.Info{ID: a.ID(), Installed: true, Version: "1.0", Provider: "test", Structured: true, Resumable: true}
}

// StartTurn implements agents.Adapter.
func (a *Adapter) StartTurn(ctx context.Context, t agents.Turn, emit agents.Emit) (agents.Process, error) {
	if a.StartTurnFunc != nil {
		return a.StartTurnFunc(ctx, t, emit)
	}
	p := NewProcess()
	p.End(agents.TurnResult{})
	return p, nil
}

// Registry is the session manager's view of the agent registry, over a
// fixed list of adapters; the first is the default.
type Registry struct {
	Adapters []agents.Adapter
}

// Lookup finds an adapter by id.
func (r *Registry) Lookup(id string) (agents.Adapter, error) {
	for _, a := range r.Adapters {
		if a.ID() == id {
			return a, nil
		}
	}
	return nil, fmt.Errorf("unknown agent %q", id)
}

// Default is the first adapter.
func (r *Registry) Default(context.Context) (agents.Adapter, error) {
	if len(r.Adapters) == 0 {
		return nil, errors.New("no agents")
	}
	return r.Adapters[0], nil
}

// List describes every adapter.
func (r *Registry) List(ctx context.Context) []agents.Info {
	out := make([]agents.Info, 0, len(r.Adapters))
	for _, a := range r.Adapters {
		out = append(out, a.Describe(ctx))
	}
	return out
}

// Process is an agents.Process that runs until End or Kill. InputFunc,
// when set, takes terminal input; otherwise Input answers
// agents.ErrNoInput, as a structured agent does.
type Process struct {
	InputFunc func(p []byte) error

	once   sync.Once
	done   chan struct{}
	mu     sync.Mutex
	res    agents.TurnResult
	killed bool
}

var _ agents.Process = (*Process)(nil)

// NewProcess is a running process.
func NewProcess() *Process { return &Process{done: make(chan struct{})} }

// End finishes the process with res (the first End or Kill wins).
func (p *Process) End(res agents.TurnResult) {
	p.once.Do(func() {
		p.mu.Lock()
		p.res = res
		p.mu.Unlock()
		close(p.done)
	})
}

// Wait implements agents.Process.
func (p *Process) Wait() agents.TurnResult {
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.res
}

// Kill implements agents.Process: the process ends as a signal would end
// it.
func (p *Process) Kill() error {
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	p.End(agents.TurnResult{ExitCode: -1, Err: errors.New("signal: killed")})
	return nil
}

// Killed reports whether Kill was called.
func (p *Process) Killed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killed
}

// Input implements agents.Process.
func (p *Process) Input(b []byte) error {
	if p.InputFunc != nil {
		return p.InputFunc(b)
	}
	return agents.ErrNoInput
}

// Done is closed when the process has ended.
func (p *Process) Done() <-chan struct{} { return p.done }
