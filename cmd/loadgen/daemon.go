package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"reeve.dev/reeve/daemon/controlclient"
	"reeve.dev/reeve/daemon/home"
)

// scratchDaemon is a daemon of the binary under test in a temporary home,
// with one work directory for sessions: each measurement starts from an
// empty log and leaves nothing behind.
type scratchDaemon struct {
	reeve   string
	tmp     string
	dir     home.Dir
	work    string
	stopped bool
}

func startScratchDaemon(reeve string) (*scratchDaemon, error) {
	tmp, err := os.MkdirTemp("", "loadgen-")
	if err != nil {
		return nil, err
	}
	d := &scratchDaemon{reeve: reeve, tmp: tmp, dir: home.Dir(filepath.Join(tmp, "home")), work: filepath.Join(tmp, "work")}
	if err := os.MkdirAll(d.work, 0o755); err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	if err := d.run("start", "--listen", "127.0.0.1:0"); err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	return d, nil
}

// client connects to the daemon's REST API and registers the work
// directory, whose id sessions are launched in.
func (d *scratchDaemon) client(ctx context.Context) (*controlclient.Client, string, error) {
	cl, _, err := controlclient.FromHome(d.dir, 30*time.Second)
	if err != nil {
		return nil, "", err
	}
	added, err := cl.AddDirectory(ctx, d.work)
	if err != nil {
		return nil, "", err
	}
	return cl, added.Directory.ID, nil
}

// run runs one reeve command against the daemon's home.
func (d *scratchDaemon) run(args ...string) error {
	cmd := exec.Command(d.reeve, args...)
	cmd.Env = append(os.Environ(), "REEVE_HOME="+string(d.dir))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("reeve %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// stop stops the daemon gracefully, so its last connection checkpoints the
// log into the database file.
func (d *scratchDaemon) stop() error {
	if err := d.run("stop", "--timeout", "30"); err != nil {
		return err
	}
	d.stopped = true
	return nil
}

// close forces a daemon still running to stop and removes its home.
func (d *scratchDaemon) close() {
	if !d.stopped {
		d.run("stop", "--force", "--timeout", "10")
	}
	os.RemoveAll(d.tmp)
}
