package runtime

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"reeve.dev/reeve/internal/atomicfile"
)

// contextEnv names the file that holds a session's context for agents
// without a mechanism of their own (terminal programs).
const contextEnv = "REEVE_CONTEXT_FILE"

// sessionContext is the context vault's working set of a session: resolved
// when the session starts and kept in its state folder (never in the
// worktree), so that every later turn gives the agent the same. It returns
// the text for the adapter and the agents' environment, which names the
// file when there is one.
func (m *Manager) sessionContext(ctx context.Context, sessionID, stateDir, workdir, prompt string, first bool) (string, []string) {
	env := m.opts.Env
	if m.opts.Context == nil {
		return "", env
	}
	path := filepath.Join(stateDir, "context.md")
	if first {
		text := m.opts.Context(ctx, workdir, prompt)
		if text == "" {
			return "", env
		}
		if err := atomicfile.WriteFile(path, []byte(text), atomicfile.PrivateFile); err != nil {
			fmt.Fprintf(m.opts.Log, "worker: session %s: keep its context: %v\n", sessionID, err)
		}
		return text, append(env[:len(env):len(env)], contextEnv+"="+path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintf(m.opts.Log, "worker: session %s: read its context: %v\n", sessionID, err)
		}
		return "", env
	}
	return string(b), append(env[:len(env):len(env)], contextEnv+"="+path)
}
