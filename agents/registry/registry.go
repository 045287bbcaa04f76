// Package registry knows the agents this machine can run: it builds every
// adapter, finds one by id, lists them with what is installed, and picks
// the default agent.
package registry

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"

	"reeve.dev/reeve/agents"
	"reeve.dev/reeve/agents/claude"
	"reeve.dev/reeve/agents/codex"
	"reeve.dev/reeve/agents/custom"
	"reeve.dev/reeve/agents/gemini"
	"reeve.dev/reeve/agents/shell"
)

// Options configures a Registry. Both functions are injectable so tests can
// pretend an agent is, or is not, installed.
type Options struct {
	// Getenv reads the adapters' configuration (REEVE_CLAUDE_PATH,
	// REEVE_CODEX_PATH, REEVE_GEMINI_PATH, REEVE_CUSTOM_AGENT_*, SHELL);
	// default os.Getenv.
	Getenv func(string) string
	// LookPath finds executables on PATH; default exec.LookPath.
	LookPath func(string) (string, error)
}

// Registry holds the adapters in a fixed order: the coding agents first,
// then shell, then the custom agent when one is configured.
type Registry struct {
	adapters []agents.Adapter
	// preferred are the ids Default tries, in order, before falling back.
	preferred []string
	fallback  string
}

// New builds the adapters from o.
func New(o Options) *Registry {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.LookPath == nil {
		o.LookPath = exec.LookPath
	}
	r := &Registry{preferred: []string{claude.ID, codex.ID, gemini.ID}, fallback: shell.ID}
	r.adapters = append(r.adapters,
		claude.New(claude.Options{Getenv: o.Getenv, LookPath: o.LookPath}),
		codex.New(codex.Options{Getenv: o.Getenv, LookPath: o.LookPath}),
		gemini.New(gemini.Options{Getenv: o.Getenv, LookPath: o.LookPath}),
	)
	r.adapters = append(r.adapters, shell.New(shell.Options{Getenv: o.Getenv, LookPath: o.LookPath}))
	if co, ok := custom.FromEnv(o.Getenv); ok {
		if r.has(co.ID) {
			co.Problem = joinProblems(co.Problem, fmt.Sprintf("%s=%q is the id of a built-in agent; choose another", custom.EnvID, co.ID))
			co.ID = custom.DefaultID
		}
		co.LookPath = o.LookPath
		r.adapters = append(r.adapters, custom.New(co))
	}
	return r
}

func (r *Registry) has(id string) bool {
	return slices.ContainsFunc(r.adapters, func(a agents.Adapter) bool { return a.ID() == id })
}

func joinProblems(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// Adapters returns every adapter, in order.
func (r *Registry) Adapters() []agents.Adapter { return slices.Clone(r.adapters) }

// IDs returns the adapter ids, in order.
func (r *Registry) IDs() []string {
	ids := make([]string, len(r.adapters))
	for i, a := range r.adapters {
		ids[i] = a.ID()
	}
	return ids
}

// Lookup finds an adapter by id. The error for an unknown id lists the
// available ones.
func (r *Registry) Lookup(id string) (agents.Adapter, error) {
	for _, a := range r.adapters {
		if a.ID() == id {
			return a, nil
		}
	}
	return nil, fmt.Errorf("unknown agent %q (available: %s)", id, strings.Join(r.IDs(), ", "))
}

// List describes every adapter, in order.
func (r *Registry) List(ctx context.Context) []agents.Info {
	infos := make([]agents.Info, len(r.adapters))
	for i, a := range r.adapters {
		infos[i] = a.Describe(ctx)
	}
	return infos
}

// Default is the agent a session gets when none is asked for: the first
// installed and usable of claude, codex and gemini, otherwise shell.
func (r *Registry) Default(ctx context.Context) (agents.Adapter, error) {
	for _, id := range r.preferred {
		a, err := r.Lookup(id)
		if err != nil {
			continue
		}
		if info := a.Describe(ctx); info.Installed && info.Problem == "" {
			return a, nil
		}
	}
	return r.Lookup(r.fallback)
}
