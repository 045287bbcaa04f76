package ptyrun

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// DefaultVersionTimeout bounds one `<exe> --version`.
const DefaultVersionTimeout = 10 * time.Second

// VersionCache remembers what `<exe> --version` says per executable file,
// so that listing agents does not start every agent each time. A changed
// file (an upgrade) is asked again.
type VersionCache struct {
	// Parse picks the version out of the command's output; default the
	// first word.
	Parse func(out string) string
	// Timeout: see DefaultVersionTimeout.
	Timeout time.Duration

	mu      sync.Mutex
	entries map[string]versionEntry
}

type versionEntry struct {
	size    int64
	modTime time.Time
	version string
}

// Get returns the version of the executable at path.
func (c *VersionCache) Get(ctx context.Context, path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("version of %s: %w", path, err)
	}
	c.mu.Lock()
	if e, ok := c.entries[path]; ok && e.size == st.Size() && e.modTime.Equal(st.ModTime()) {
		c.mu.Unlock()
		return e.version, nil
	}
	c.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, orDefault(c.Timeout, DefaultVersionTimeout))
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "--version")
	cmd.WaitDelay = time.Second // a child holding stdout must not outlive the timeout
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", path, err)
	}
	parse := c.Parse
	if parse == nil {
		parse = func(s string) string {
			if f := strings.Fields(s); len(f) > 0 {
				return f[0]
			}
			return ""
		}
	}
	v := parse(string(out))
	if v == "" {
		return "", fmt.Errorf("%s --version: no version in %q", path, strings.TrimSpace(string(out)))
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]versionEntry{}
	}
	c.entries[path] = versionEntry{size: st.Size(), modTime: st.ModTime(), version: v}
	return v, nil
}
