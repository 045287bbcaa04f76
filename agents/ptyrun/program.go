package ptyrun

import (
	"context"
	"fmt"

	"reeve.dev/reeve/agents"
)

// Program finds an agent's executable, named by an environment variable or
// else found on PATH, and reports it with its version.
type Program struct {
	Name     string // looked up on PATH
	EnvPath  string // overrides Name, e.g. REEVE_CLAUDE_PATH
	Getenv   func(string) string
	LookPath func(string) (string, error)
	Versions *VersionCache
}

// Find returns the executable's path, or why there is none.
func (p Program) Find() (string, error) {
	if v := p.Getenv(p.EnvPath); v != "" {
		path, err := p.LookPath(v)
		if err != nil {
			return "", fmt.Errorf("%s=%s: %w", p.EnvPath, v, err)
		}
		return path, nil
	}
	path, err := p.LookPath(p.Name)
	if err != nil {
		return "", fmt.Errorf("%s is not installed (not on PATH; set %s to use another executable)", p.Name, p.EnvPath)
	}
	return path, nil
}

// Describe completes info with where the program is and its version,
// asking the executable once per file.
func (p Program) Describe(ctx context.Context, info agents.Info) agents.Info {
	path, err := p.Find()
	if err != nil {
		info.Problem = err.Error()
		return info
	}
	info.Installed, info.Path = true, path
	v, err := p.Versions.Get(ctx, path)
	if err != nil {
		info.Problem = err.Error()
	}
	info.Version = v
	return info
}
