package cli

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"reeve.dev/reeve/daemon/controlclient"
	"reeve.dev/reeve/daemon/wire"
)

// remove of a directory whose sessions are active is a conflict (exit 5)
// that says why; the daemon's message names the sessions.
func TestRemoveRefusedWhileSessionsRun(t *testing.T) {
	dir := t.TempDir()
	f := &fakeDaemon{
		dirs: func() ([]wire.Directory, error) { return []wire.Directory{{ID: "d1", Path: dir}}, nil },
		removeDir: func(id string) error {
			return &controlclient.APIError{Status: http.StatusConflict, Code: wire.CodeDirectoryInUse,
				Message: "remove directory d1: 1 active session(s) are governed by its policy: S1; stop them first (`reeve session stop SID`)"}
		},
	}
	cmd, out, errb := testCmd(t, f)
	err := runRemove(context.Background(), &removeOptions{daemonCmd: cmd, path: dir})
	if exitCode(err) != ExitConflict || !strings.Contains(err.Error(), "S1") || out.String() != "" {
		t.Fatalf("remove: %v (exit %d) out %q err %q", err, exitCode(err), out, errb)
	}
}
