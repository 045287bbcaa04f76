package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"

	"reeve.dev/reeve/daemon/autostart"
	"reeve.dev/reeve/internal/goproxy"
	"reeve.dev/reeve/internal/version"
)

// reeve update and status --check-updates: reeve is published as a Go
// module, so its package registry is the Go module proxy protocol
// (GOPROXY), checked against the Go checksum database (GOSUMDB). An update
// downloads the newest version's module, verifies it, builds it with the
// Go toolchain, and replaces this binary atomically, keeping the previous
// one beside it as <binary>.previous.

// reeveModule is the module reeve is published as.
const reeveModule = "reeve.dev/reeve"

type updateOptions struct {
	daemonCmd
	yes  bool
	json bool
}

type updateCheck struct {
	Current   string `json:"current"`
	Latest    string `json:"latest,omitempty"`
	Available bool   `json:"available"`
	Error     string `json:"error,omitempty"`
}

type updateReport struct {
	updateCheck
	Updated          bool   `json:"updated"`
	Binary           string `json:"binary,omitempty"`
	Previous         string `json:"previous,omitempty"`
	Sum              string `json:"sum,omitempty"`
	RestartedDaemon  bool   `json:"restarted_daemon"`
	RestartedService bool   `json:"restarted_service"`
}

func newUpdateCmd(env *Env) *cobra.Command {
	opts := &updateOptions{}
	cmd := &cobra.Command{
		Use:   "update",
		Short: "Update reeve to the newest version from the Go module proxy",
		Long: `Update reeve: read the newest version from the Go module proxy (GOPROXY,
@latest), download it, verify it against the Go checksum database (GOSUMDB),
build it with the Go toolchain, and replace this binary atomically. The
previous binary is kept beside it as <binary>.previous for a rollback. With
--yes the running daemon (and the auto-start service) is restarted on the
new version; without it, restart it when convenient.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.bind(cmd, env); err != nil {
				return err
			}
			return runUpdate(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.yes, "yes", false, "also restart the running daemon and service on the new version")
	cmd.Flags().BoolVar(&opts.json, "json", false, "print the outcome as JSON")
	return cmd
}

func proxyOptions(env *Env) goproxy.Options {
	return goproxy.FromEnv(goproxy.Options{Module: reeveModule}, env.Getenv)
}

// currentVersion is this binary's version as a module version.
func currentVersion() string {
	v := version.Version
	if !strings.HasPrefix(v, "v") {
		v = "v" + v
	}
	return v
}

// checkUpdate asks the proxy for the newest version.
func checkUpdate(ctx context.Context, env *Env) (updateCheck, error) {
	c := updateCheck{Current: currentVersion()}
	in, err := goproxy.Latest(ctx, proxyOptions(env))
	if err != nil {
		c.Error = err.Error()
		return c, err
	}
	c.Latest = in.Version
	c.Available = semver.IsValid(in.Version) && (!semver.IsValid(c.Current) || semver.Compare(in.Version, c.Current) > 0)
	return c, nil
}

func runUpdate(ctx context.Context, o *updateOptions) error {
	c, err := checkUpdate(ctx, o.env)
	if err != nil {
		return updateExit(err)
	}
	rep := updateReport{updateCheck: c}
	if !c.Available {
		fmt.Fprintf(o.env.Err, "reeve: %s is up to date (newest %s)\n", c.Current, c.Latest)
		if o.json {
			return writeJSON(o.env.Out, rep)
		}
		return nil
	}
	exe, err := o.env.Executable()
	if err != nil {
		return withExit(ExitFailure, fmt.Errorf("locate the reeve executable: %w", err))
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	rep.Binary = exe
	fmt.Fprintf(o.env.Err, "reeve: updating %s to %s\n", c.Current, c.Latest)
	work, err := os.MkdirTemp("", "reeve-update-")
	if err != nil {
		return withExit(ExitFailure, err)
	}
	defer os.RemoveAll(work)
	fmt.Fprintf(o.env.Err, "reeve: downloading %s@%s and checking it against the checksum database\n", reeveModule, c.Latest)
	zipPath, sum, err := goproxy.Download(ctx, proxyOptions(o.env), c.Latest, work)
	if err != nil {
		return updateExit(err)
	}
	rep.Sum = sum
	src := filepath.Join(work, "src")
	if err := modzip.Unzip(src, module.Version{Path: reeveModule, Version: c.Latest}, zipPath); err != nil {
		return withExit(ExitFailure, fmt.Errorf("unpack %s: %w", c.Latest, err))
	}
	fmt.Fprintf(o.env.Err, "reeve: verified (%s); building it\n", sum)
	built := filepath.Join(work, "reeve")
	if err := buildReeve(ctx, o.env, src, built, c.Latest); err != nil {
		return err
	}
	prev, err := replaceBinary(exe, built)
	if err != nil {
		return err
	}
	rep.Updated, rep.Previous = true, prev
	fmt.Fprintf(o.env.Err, "reeve: %s replaced with %s; the previous binary is kept as %s\n", exe, c.Latest, prev)

	if o.yes {
		rep.RestartedService, rep.RestartedDaemon = o.restartAll(ctx, exe)
	} else if locked, _ := o.home.Locked(); locked {
		fmt.Fprintf(o.env.Err, "reeve: the running daemon still runs the previous version; `%s` (or `%s`) moves it to the new one\n", o.reeve("restart"), o.reeve("update --yes"))
	}
	if o.json {
		return writeJSON(o.env.Out, rep)
	}
	fmt.Fprintln(o.env.Out, c.Latest)
	return nil
}

// restartAll restarts the auto-start service if it runs the daemon, else
// a daemon running from the home.
func (o *updateOptions) restartAll(ctx context.Context, exe string) (service, daemon bool) {
	for _, system := range []bool{false, true} {
		ok, err := autostart.Restart(ctx, autostart.Options{Executable: exe, Home: absPath(string(o.home)), System: system})
		if err != nil {
			fmt.Fprintf(o.env.Err, "reeve: %v\n", err)
		}
		if ok {
			fmt.Fprintln(o.env.Err, "reeve: the auto-start service was restarted on the new version")
			return true, false
		}
	}
	if locked, _ := o.home.Locked(); !locked {
		fmt.Fprintln(o.env.Err, "reeve: no daemon is running; the next start runs the new version")
		return false, false
	}
	if err := runRestart(ctx, o.restartOptions()); err != nil {
		fmt.Fprintf(o.env.Err, "reeve: the daemon was not restarted: %v\n", err)
		return false, false
	}
	return false, true
}

// restartOptions are those of the restart update --yes does, whose
// port-in-use hint names the command that has a --listen.
func (o *updateOptions) restartOptions() *restartOptions {
	return &restartOptions{daemonCmd: o.daemonCmd, timeout: 15,
		inUse: "the new version is installed: start the daemon on a free port with `" + o.reeve("restart --listen ADDR") + "`"}
}

func updateExit(err error) error {
	switch {
	case errors.Is(err, goproxy.ErrChecksum):
		return exitf(ExitDenied, "update refused, the binary is unchanged: %v", err)
	case errors.Is(err, goproxy.ErrUnverifiable):
		return exitf(ExitUsage, "update refused, the binary is unchanged: %v", err)
	case errors.Is(err, goproxy.ErrNotFound):
		return exitf(ExitNotFound, "%v", err)
	}
	return withExit(ExitFailure, err)
}

// buildReeve builds the verified module with the Go toolchain. Its
// dependencies are verified by the module's own go.sum.
func buildReeve(ctx context.Context, env *Env, src, out, ver string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return exitf(ExitFailure, "update builds the new version with the Go toolchain, and `go` is not on PATH: install Go, or install reeve %s another way", ver)
	}
	cmd := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-o", out,
		"-ldflags", "-X reeve.dev/reeve/internal/version.Version="+strings.TrimPrefix(ver, "v"), "./cmd/reeve")
	cmd.Dir = src
	// Built as the README builds it: static, without cgo (docs/architecture.md,
	// "Start-up and memory").
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	if p := env.Getenv("GOPROXY"); p != "" {
		cmd.Env = append(cmd.Env, "GOPROXY="+p)
	}
	if s := env.Getenv("GOSUMDB"); s != "" {
		cmd.Env = append(cmd.Env, "GOSUMDB="+s)
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return exitf(ExitFailure, "build %s: %v\n%s", ver, err, strings.TrimSpace(string(b)))
	}
	return nil
}

// replaceBinary keeps exe as exe.previous and renames the new binary over
// exe, so that a running reeve and a concurrent start see either the old
// file or the new one, never part of one.
func replaceBinary(exe, built string) (string, error) {
	dir := filepath.Dir(exe)
	tmp, err := os.CreateTemp(dir, ".reeve-update-*")
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return "", exitf(ExitDenied, "cannot write to %s: run update as the binary's owner (or with sudo)", dir)
		}
		return "", withExit(ExitFailure, err)
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	in, err := os.Open(built)
	if err != nil {
		tmp.Close()
		return "", withExit(ExitFailure, err)
	}
	_, err = io.Copy(tmp, in)
	in.Close()
	if err == nil {
		err = tmp.Chmod(0o755)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", withExit(ExitFailure, fmt.Errorf("write the new binary: %w", err))
	}
	prev := exe + ".previous"
	os.Remove(prev)
	if err := os.Link(exe, prev); err != nil {
		return "", withExit(ExitFailure, fmt.Errorf("keep the previous binary: %w", err))
	}
	if err := os.Rename(tmp.Name(), exe); err != nil {
		return "", withExit(ExitFailure, fmt.Errorf("replace %s: %w", exe, err))
	}
	return prev, nil
}
