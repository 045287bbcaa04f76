package autostart

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/kardianos/service"
	"reeve.dev/reeve/internal/atomicfile"
)

// Install writes and enables the unit. On the live system it also starts
// the unit when start is set. Installing the same unit again changes
// nothing; a different one (another executable or home) replaces it.
func Install(ctx context.Context, o Options, start bool) (Report, error) {
	u, err := Render(o)
	if err != nil {
		return Report{}, err
	}
	rep := Report{Unit: u}
	if o.Root != "" {
		return installRoot(ctx, o, u, rep)
	}
	if err := o.managerRunning(ctx, u.Platform); err != nil {
		return rep, err
	}
	svc, err := o.service(u)
	if err != nil {
		return rep, err
	}
	old, err := os.ReadFile(u.Path)
	switch {
	case err == nil && string(old) == u.Content:
		rep.Steps = append(rep.Steps, "unit "+u.Path+" is already installed")
	case err == nil:
		// The library refuses to overwrite: take the old unit out first.
		if err := svc.Uninstall(); err != nil {
			return rep, fmt.Errorf("replace %s: %w", u.Path, wrapFS(err, u.Path))
		}
		rep.Steps = append(rep.Steps, "removed the previous unit "+u.Path)
		fallthrough
	default:
		if err := os.MkdirAll(filepath.Dir(u.Path), 0o755); err != nil {
			return rep, wrapFS(err, u.Path)
		}
		if err := svc.Install(); err != nil {
			return rep, fmt.Errorf("install %s: %w", u.Path, wrapFS(err, u.Path))
		}
		rep.Changed = true
		rep.Steps = append(rep.Steps, "wrote "+u.Path, "enabled "+o.unitID(u.Platform))
	}
	if start {
		if st, _ := svc.Status(); st != service.StatusRunning {
			if err := svc.Start(); err != nil {
				return rep, fmt.Errorf("start %s: %w", o.unitID(u.Platform), err)
			}
			rep.Started = true
			rep.Steps = append(rep.Steps, "started "+o.unitID(u.Platform))
		}
	}
	return rep, nil
}

// Uninstall stops, disables and removes the unit; nothing to do when it is
// not installed.
func Uninstall(ctx context.Context, o Options) (Report, error) {
	u, err := Render(o)
	if err != nil {
		return Report{}, err
	}
	rep := Report{Unit: u}
	if _, err := os.Stat(u.Path); errors.Is(err, fs.ErrNotExist) {
		rep.Steps = append(rep.Steps, "no unit at "+u.Path)
		return rep, nil
	}
	if o.Root != "" {
		return uninstallRoot(ctx, o, u, rep)
	}
	if err := o.managerRunning(ctx, u.Platform); err != nil {
		return rep, err
	}
	svc, err := o.service(u)
	if err != nil {
		return rep, err
	}
	if st, _ := svc.Status(); st == service.StatusRunning {
		if err := svc.Stop(); err != nil {
			return rep, fmt.Errorf("stop %s: %w", o.unitID(u.Platform), err)
		}
		rep.Steps = append(rep.Steps, "stopped "+o.unitID(u.Platform))
	}
	if err := svc.Uninstall(); err != nil {
		return rep, fmt.Errorf("uninstall %s: %w", u.Path, wrapFS(err, u.Path))
	}
	rep.Changed = true
	rep.Steps = append(rep.Steps, "disabled "+o.unitID(u.Platform), "removed "+u.Path)
	return rep, nil
}

// StatusOf reports the unit. The error is ErrNoManager (with the status
// of the file still filled in) when the manager is not running.
func StatusOf(ctx context.Context, o Options) (Status, error) {
	u, err := Render(o)
	if err != nil {
		return Status{}, err
	}
	st := Status{Platform: u.Platform, Unit: o.unitID(u.Platform), Path: u.Path, Scope: o.scope()}
	if b, err := os.ReadFile(u.Path); err == nil {
		st.Installed, st.Current = true, string(b) == u.Content
	}
	if o.Root != "" {
		st.Manager = "root"
		if st.Installed && u.Platform == "systemd" {
			out, _ := o.run(ctx, "systemctl", o.rootArgs("is-enabled", st.Unit)...)
			st.Enabled = strings.TrimSpace(string(out)) == "enabled"
		}
		return st, nil
	}
	if err := o.managerRunning(ctx, u.Platform); err != nil {
		st.Manager, st.Detail = "not running", err.Error()
		return st, err
	}
	st.Manager = "running"
	if !st.Installed {
		return st, nil
	}
	switch u.Platform {
	case "systemd":
		out, _ := o.run(ctx, "systemctl", o.liveArgs("is-enabled", st.Unit)...)
		st.Enabled = strings.TrimSpace(string(out)) == "enabled"
	case "launchd":
		st.Enabled = true // RunAtLoad: an installed agent starts at login
	}
	svc, err := o.service(u)
	if err != nil {
		return st, err
	}
	s, err := svc.Status()
	st.Running = s == service.StatusRunning
	if err != nil && !errors.Is(err, service.ErrNotInstalled) {
		st.Detail = err.Error()
	}
	return st, nil
}

// service is the library's handle on the unit, given the unit text we
// rendered as its custom script.
func (o Options) service(u Unit) (service.Service, error) {
	cfg := &service.Config{
		Name:        o.name(),
		DisplayName: "reeve daemon",
		Description: "reeve daemon (home " + o.Home + ")",
		Executable:  o.Executable,
		Arguments:   o.Command()[1:],
		Option: service.KeyValue{
			"UserService":   !o.System,
			"SystemdScript": u.Content,
			"LaunchdConfig": u.Content,
		},
	}
	if u.Platform == "launchd" {
		cfg.Name = o.label()
	}
	if o.System {
		cfg.UserName = o.UserName
	}
	s, err := service.New(noProgram{}, cfg)
	if err != nil {
		return nil, fmt.Errorf("service manager: %w", err)
	}
	return s, nil
}

// noProgram: this process only manages the unit; the unit runs `reeve
// start --foreground`, which is not a service.Interface.
type noProgram struct{}

func (noProgram) Start(service.Service) error { return nil }
func (noProgram) Stop(service.Service) error  { return nil }

// managerRunning checks that the platform's manager is there to talk to.
func (o Options) managerRunning(ctx context.Context, platform string) error {
	switch platform {
	case "systemd":
		if service.Platform() != "linux-systemd" {
			return fmt.Errorf("%w: systemd is not running on this machine (PID 1 is %s); write the unit with `reeve service install --print` and place it yourself, or start the daemon with `reeve start`", ErrNoManager, pid1())
		}
		if !o.System {
			if out, err := o.run(ctx, "systemctl", "--user", "show-environment"); err != nil {
				return fmt.Errorf("%w: the systemd user manager cannot be reached (%s); log in to a systemd session, enable lingering (loginctl enable-linger), or install a system unit with --system", ErrNoManager, firstLine(out, err))
			}
		}
	case "launchd":
		if _, err := exec.LookPath("launchctl"); err != nil {
			return fmt.Errorf("%w: launchctl is not available", ErrNoManager)
		}
	}
	return nil
}

func pid1() string {
	b, err := os.ReadFile("/proc/1/comm")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

func firstLine(out []byte, err error) string {
	if l, _, _ := bytes.Cut(bytes.TrimSpace(out), []byte("\n")); len(l) > 0 {
		return string(l)
	}
	return err.Error()
}

func (o Options) liveArgs(verb string, args ...string) []string {
	if o.System {
		return append([]string{verb}, args...)
	}
	return append([]string{"--user", verb}, args...)
}

func (o Options) rootArgs(verb string, args ...string) []string {
	a := []string{"--root=" + o.Root}
	if !o.System {
		a = append(a, "--global")
	}
	return append(append(a, verb), args...)
}

func installRoot(ctx context.Context, o Options, u Unit, rep Report) (Report, error) {
	old, err := os.ReadFile(u.Path)
	if err != nil || string(old) != u.Content {
		if err := os.MkdirAll(filepath.Dir(u.Path), 0o755); err != nil {
			return rep, wrapFS(err, u.Path)
		}
		if err := atomicfile.WriteFile(u.Path, []byte(u.Content), 0o644); err != nil {
			return rep, wrapFS(err, u.Path)
		}
		rep.Changed = true
		rep.Steps = append(rep.Steps, "wrote "+u.Path)
	} else {
		rep.Steps = append(rep.Steps, "unit "+u.Path+" is already installed")
	}
	if u.Platform != "systemd" {
		return rep, nil
	}
	id := o.unitID(u.Platform)
	if out, _ := o.run(ctx, "systemctl", o.rootArgs("is-enabled", id)...); strings.TrimSpace(string(out)) == "enabled" {
		return rep, nil
	}
	if out, err := o.run(ctx, "systemctl", o.rootArgs("enable", id)...); err != nil {
		return rep, fmt.Errorf("enable %s under %s: %s", id, o.Root, firstLine(out, err))
	}
	rep.Changed = true
	rep.Steps = append(rep.Steps, "enabled "+id+" under "+o.Root)
	return rep, nil
}

func uninstallRoot(ctx context.Context, o Options, u Unit, rep Report) (Report, error) {
	if u.Platform == "systemd" {
		id := o.unitID(u.Platform)
		if out, err := o.run(ctx, "systemctl", o.rootArgs("disable", id)...); err != nil {
			return rep, fmt.Errorf("disable %s under %s: %s", id, o.Root, firstLine(out, err))
		}
		rep.Steps = append(rep.Steps, "disabled "+id+" under "+o.Root)
	}
	if err := os.Remove(u.Path); err != nil {
		return rep, wrapFS(err, u.Path)
	}
	rep.Changed = true
	rep.Steps = append(rep.Steps, "removed "+u.Path)
	// Directories install (or systemctl) created and that are now empty:
	// the wants directory beside the unit, then the unit's own parents.
	dir := filepath.Dir(u.Path)
	for _, wants := range []string{"default.target.wants", "multi-user.target.wants"} {
		os.Remove(filepath.Join(dir, wants))
	}
	for d := dir; d != filepath.Clean(o.Root) && strings.HasPrefix(d, filepath.Clean(o.Root)); d = filepath.Dir(d) {
		if os.Remove(d) != nil {
			break
		}
	}
	return rep, nil
}

// Restart restarts the unit on the live system when it is running;
// it reports whether it did.
func Restart(ctx context.Context, o Options) (bool, error) {
	st, err := StatusOf(ctx, o)
	if err != nil || !st.Running {
		return false, nil
	}
	u, err := Render(o)
	if err != nil {
		return false, err
	}
	svc, err := o.service(u)
	if err != nil {
		return false, err
	}
	if err := svc.Restart(); err != nil {
		return false, fmt.Errorf("restart %s: %w", st.Unit, err)
	}
	return true, nil
}
