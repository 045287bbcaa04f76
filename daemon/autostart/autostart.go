// Package autostart manages the unit that makes the platform's service
// manager start the daemon: a systemd unit on Linux (a user unit by
// default, a system unit on request) and a launchd agent or daemon on
// macOS, through github.com/kardianos/service. The unit runs the
// supervisor in the foreground (`reeve start --foreground --home H`), which
// uses the home's persisted launch settings, restarts it on failure and
// leaves its output to the platform's log (the journal).
//
// With Options.Root the unit is written under that directory instead of
// the live system (an image being built, a test): the files are placed and
// enabled with `systemctl --root`, and no manager is asked to start
// anything.
package autostart

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Errors a caller maps to its exit codes.
var (
	// ErrNoManager: the platform's service manager is not running here (a
	// container without systemd as PID 1, no user manager).
	ErrNoManager = errors.New("no service manager is running")
	// ErrUnsupported: this platform has no service manager reeve writes
	// units for.
	ErrUnsupported = errors.New("auto-start is not supported on this platform")
	// ErrPermission: the unit's place is not writable by this user.
	ErrPermission = errors.New("permission denied")
)

// Options say which unit: for which home and executable, user or system,
// live or under a root.
type Options struct {
	Executable string // absolute path of the reeve binary
	Home       string // absolute path of the daemon home
	Name       string // unit name; default "reeve"
	System     bool   // a system unit (boot) instead of the user's (login)
	UserName   string // with System: the user the daemon runs as
	Root       string // write under this directory instead of the live system
	GOOS       string // default runtime.GOOS
	// UserHome is the user's home directory, where user units live;
	// default os.UserHomeDir.
	UserHome string
	// Run runs a manager command (systemctl, launchctl) and returns its
	// combined output; default exec.
	Run func(ctx context.Context, name string, args ...string) ([]byte, error)
}

func (o Options) name() string {
	if o.Name != "" {
		return o.Name
	}
	return "reeve"
}

func (o Options) goos() string {
	if o.GOOS != "" {
		return o.GOOS
	}
	return runtime.GOOS
}

// label is the launchd label.
func (o Options) label() string { return "dev.reeve." + o.name() }

// Command is the unit's command line: the supervisor in the foreground
// with the home, which holds the persisted launch settings.
func (o Options) Command() []string {
	return []string{o.Executable, "start", "--foreground", "--home", o.Home}
}

func (o Options) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	if o.Run != nil {
		return o.Run(ctx, name, args...)
	}
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}

func (o Options) check() error {
	if !filepath.IsAbs(o.Executable) || !filepath.IsAbs(o.Home) {
		return fmt.Errorf("executable and home must be absolute paths, got %q and %q", o.Executable, o.Home)
	}
	for _, s := range []string{o.Executable, o.Home, o.Name, o.UserName} {
		if strings.ContainsAny(s, "\n\r\x00") || strings.Contains(s, "{{") {
			return fmt.Errorf("%q cannot be written into a unit", s)
		}
	}
	if o.Name != "" && strings.ContainsAny(o.Name, "/ ") {
		return fmt.Errorf("unit name %q must not contain slashes or spaces", o.Name)
	}
	return nil
}

// Unit is a rendered unit and where it goes.
type Unit struct {
	Platform string `json:"platform"` // systemd or launchd
	Path     string `json:"path"`     // where install writes it (under Root when set)
	Content  string `json:"-"`
}

// Render renders the unit for the options without writing anything.
func Render(o Options) (Unit, error) {
	if err := o.check(); err != nil {
		return Unit{}, err
	}
	switch o.goos() {
	case "linux":
		p, err := o.systemdPath()
		return Unit{Platform: "systemd", Path: p, Content: systemdUnit(o)}, err
	case "darwin":
		p, err := o.launchdPath()
		return Unit{Platform: "launchd", Path: p, Content: launchdPlist(o)}, err
	}
	return Unit{}, fmt.Errorf("%w (%s): start the daemon with `reeve start`", ErrUnsupported, o.goos())
}

func (o Options) userHome() (string, error) {
	if o.UserHome != "" {
		return o.UserHome, nil
	}
	return os.UserHomeDir()
}

func (o Options) systemdPath() (string, error) {
	unit := o.name() + ".service"
	switch {
	case o.Root != "" && o.System:
		return filepath.Join(o.Root, "etc/systemd/system", unit), nil
	case o.Root != "":
		// Under a root there is no user: the unit is a user unit for every
		// user (systemctl --global).
		return filepath.Join(o.Root, "etc/systemd/user", unit), nil
	case o.System:
		return filepath.Join("/etc/systemd/system", unit), nil
	}
	h, err := o.userHome()
	if err != nil {
		return "", fmt.Errorf("locate user units: %w", err)
	}
	return filepath.Join(h, ".config/systemd/user", unit), nil
}

func (o Options) launchdPath() (string, error) {
	file := o.label() + ".plist"
	var dir string
	if o.System {
		dir = "/Library/LaunchDaemons"
	} else {
		h, err := o.userHome()
		if err != nil {
			return "", fmt.Errorf("locate launch agents: %w", err)
		}
		dir = filepath.Join(h, "Library/LaunchAgents")
	}
	if o.Root != "" {
		dir = filepath.Join(o.Root, dir)
	}
	return filepath.Join(dir, file), nil
}

// Status is what the platform says of the unit.
type Status struct {
	Platform  string `json:"platform"`
	Unit      string `json:"unit"`
	Path      string `json:"path"`
	Scope     string `json:"scope"` // user or system
	Installed bool   `json:"installed"`
	Current   bool   `json:"current"` // the installed file is what install would write now
	Enabled   bool   `json:"enabled"`
	Running   bool   `json:"running"`
	// Manager is running, not running, or root (an install under a root,
	// where nothing runs).
	Manager string `json:"manager"`
	Detail  string `json:"detail,omitempty"`
}

func (o Options) scope() string {
	if o.System {
		return "system"
	}
	return "user"
}

// unitID is the name the manager knows the unit by.
func (o Options) unitID(platform string) string {
	if platform == "launchd" {
		return o.label()
	}
	return o.name() + ".service"
}

// Report says what an install or uninstall did.
type Report struct {
	Unit    Unit     `json:"unit"`
	Changed bool     `json:"changed"` // false when there was nothing to do
	Started bool     `json:"started,omitempty"`
	Steps   []string `json:"steps"` // what was done, in order
}

// wrapFS turns a permission error into ErrPermission with the path.
func wrapFS(err error, path string) error {
	if errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("%w: cannot write %s (a system unit needs root: run with sudo, or install a user unit)", ErrPermission, path)
	}
	return err
}
