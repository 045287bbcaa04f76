package contextvault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// SessionContext returns what the daemon calls when a session starts: it
// resolves the entries relevant to the session's task in its directory,
// on this device, and renders them for the agent. It needs no network
// (entries are as of the last sync) and answers "" when the home has no
// vault, nothing is relevant, or anything fails (logged): a session never
// fails for want of context.
func SessionContext(home string, log io.Writer) func(ctx context.Context, dir, task string) string {
	if log == nil {
		log = io.Discard
	}
	return func(ctx context.Context, dir, task string) string {
		if _, err := os.Stat(filepath.Join(home, "context", "context.db")); err != nil {
			return "" // no vault in this home
		}
		v, err := Open(Options{Home: home})
		if err != nil {
			fmt.Fprintf(log, "worker: context vault: %v\n", err)
			return ""
		}
		defer v.Close()
		if v.DeviceID() == "" {
			return ""
		}
		res, err := v.Resolve(ctx, ResolveOptions{Dir: dir, Task: task})
		if err != nil {
			if !errors.Is(err, ErrNoDevice) {
				fmt.Fprintf(log, "worker: context vault: resolve: %v\n", err)
			}
			return ""
		}
		if res.Unreadable.Tampered > 0 {
			fmt.Fprintf(log, "worker: context vault: %d entries did not authenticate and were left out\n", res.Unreadable.Tampered)
		}
		return res.Markdown()
	}
}
