package autostart

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// systemdWords splits an ExecStart value as systemd does for the quoting
// the renderer uses: double-quoted words with \\ and \" escapes, and %% and
// $$ for a literal % and $.
func systemdWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	inWord, quoted := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quoted && c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case c == '"':
			quoted, inWord = !quoted, true
		case c == ' ' && !quoted:
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case (c == '%' || c == '$') && i+1 < len(line) && line[i+1] == c:
			i++
			cur.WriteByte(c)
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if quoted {
		t.Fatalf("unterminated quote in %q", line)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

func execStart(t *testing.T, unit string) string {
	t.Helper()
	for _, l := range strings.Split(unit, "\n") {
		if v, ok := strings.CutPrefix(l, "ExecStart="); ok {
			return v
		}
	}
	t.Fatalf("no ExecStart in\n%s", unit)
	return ""
}

// Paths with spaces, quotes, specifiers and variables reach the command
// line unchanged.
func TestSystemdQuotingRoundTrips(t *testing.T) {
	for _, h := range []string{"/home/a/.reeve", "/tmp/with space/home", `/tmp/q"uote\back`, "/tmp/100%/$HOME", "/tmp/semi;colon"} {
		o := Options{Executable: "/usr/local/bin/reeve", Home: h, GOOS: "linux", UserHome: "/home/a"}
		u, err := Render(o)
		if err != nil {
			t.Fatal(err)
		}
		if got := systemdWords(t, execStart(t, u.Content)); !slices.Equal(got, o.Command()) {
			t.Errorf("home %q: ExecStart words %q, want %q", h, got, o.Command())
		}
	}
}

func TestRenderPlacesAndScopes(t *testing.T) {
	o := Options{Executable: "/usr/bin/reeve", Home: "/home/a/.reeve", GOOS: "linux", UserHome: "/home/a"}
	u, _ := Render(o)
	if u.Path != "/home/a/.config/systemd/user/reeve.service" || !strings.Contains(u.Content, "WantedBy=default.target") || strings.Contains(u.Content, "User=") {
		t.Fatalf("user unit at %s:\n%s", u.Path, u.Content)
	}
	o.System, o.UserName = true, "alice"
	u, _ = Render(o)
	if u.Path != "/etc/systemd/system/reeve.service" || !strings.Contains(u.Content, "WantedBy=multi-user.target") || !strings.Contains(u.Content, "User=alice") {
		t.Fatalf("system unit at %s:\n%s", u.Path, u.Content)
	}
	for _, want := range []string{"Restart=on-failure", "RestartPreventExitStatus=5", "KillMode=mixed", "SyslogIdentifier=reeve"} {
		if !strings.Contains(u.Content, want) {
			t.Errorf("unit lacks %s", want)
		}
	}
	o = Options{Executable: "/usr/bin/reeve", Home: "/Users/a/.reeve <&>", GOOS: "darwin", UserHome: "/Users/a"}
	u, _ = Render(o)
	if u.Path != "/Users/a/Library/LaunchAgents/dev.reeve.reeve.plist" || !strings.Contains(u.Content, "<string>/Users/a/.reeve &lt;&amp;&gt;</string>") || !strings.Contains(u.Content, "<key>SuccessfulExit</key>") {
		t.Fatalf("launchd agent at %s:\n%s", u.Path, u.Content)
	}
	if _, err := Render(Options{Executable: "/r", Home: "/h", GOOS: "plan9"}); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("plan9: %v", err)
	}
	for _, bad := range []Options{
		{Executable: "reeve", Home: "/h", GOOS: "linux"},
		{Executable: "/r", Home: "/h\nExecStartPre=/bin/evil", GOOS: "linux"},
		{Executable: "/r", Home: "/h/{{Path}}", GOOS: "linux"},
		{Executable: "/r", Home: "/h", Name: "../x", GOOS: "linux"},
	} {
		if _, err := Render(bad); err == nil {
			t.Errorf("rendered %+v", bad)
		}
	}
}

// tree lists every path under root.
func tree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, p)
		out = append(out, rel)
		return nil
	})
	return out
}

// Install and uninstall into a root with the real systemctl: enabled, the
// second install changes nothing, and uninstall leaves the root as it was.
func TestInstallIntoRoot(t *testing.T) {
	if _, err := exec.LookPath("systemctl"); err != nil {
		if os.Getenv("REEVE_REQUIRE_AGENTS") != "" {
			t.Fatal("systemctl is needed (Debian package systemd)")
		}
		t.Skip("systemctl is not installed (Debian package systemd)")
	}
	ctx := context.Background()
	for _, system := range []bool{false, true} {
		root := t.TempDir()
		before := tree(t, root)
		o := Options{Executable: "/usr/bin/reeve", Home: "/var/lib/reeve home", System: system, UserName: "reeve", Root: root, GOOS: "linux"}
		rep, err := Install(ctx, o, true)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Changed || rep.Started {
			t.Fatalf("install: %+v", rep)
		}
		st, err := StatusOf(ctx, o)
		if err != nil || !st.Installed || !st.Current || !st.Enabled || st.Running || st.Manager != "root" {
			t.Fatalf("status after install: %+v %v", st, err)
		}
		fi, err := os.Stat(rep.Unit.Path)
		if err != nil || fi.Mode().Perm() != 0o644 {
			t.Fatalf("unit file: %v %v", fi, err)
		}
		again, err := Install(ctx, o, true)
		if err != nil || again.Changed {
			t.Fatalf("second install: %+v %v", again, err)
		}
		// A unit written for another home is replaced.
		o2 := o
		o2.Home = "/var/lib/other"
		if st, _ := StatusOf(ctx, o2); st.Current {
			t.Fatal("a unit for another home counts as current")
		}
		if rep, err := Install(ctx, o2, false); err != nil || !rep.Changed {
			t.Fatalf("replace: %+v %v", rep, err)
		}
		rep, err = Uninstall(ctx, o2)
		if err != nil || !rep.Changed {
			t.Fatalf("uninstall: %+v %v", rep, err)
		}
		if after := tree(t, root); !slices.Equal(before, after) {
			t.Fatalf("system=%v: uninstall left %v (before %v)", system, after, before)
		}
		if st, err := StatusOf(ctx, o); err != nil || st.Installed || st.Enabled {
			t.Fatalf("status after uninstall: %+v %v", st, err)
		}
		if rep, err := Uninstall(ctx, o); err != nil || rep.Changed {
			t.Fatalf("uninstall of nothing: %+v %v", rep, err)
		}
	}
}

// Without a running systemd the live commands say so, and a fake run
// function shows which manager commands would be used.
func TestLiveWithoutManager(t *testing.T) {
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		t.Skip("systemd runs on this machine")
	}
	o := Options{Executable: "/usr/bin/reeve", Home: "/h", GOOS: "linux", UserHome: t.TempDir()}
	if _, err := Install(context.Background(), o, true); !errors.Is(err, ErrNoManager) || !strings.Contains(err.Error(), "--print") {
		t.Fatalf("install without systemd: %v", err)
	}
	st, err := StatusOf(context.Background(), o)
	if !errors.Is(err, ErrNoManager) || st.Manager != "not running" || st.Installed {
		t.Fatalf("status without systemd: %+v %v", st, err)
	}
	if entries, _ := os.ReadDir(o.UserHome); len(entries) != 0 {
		t.Fatalf("a refused install wrote %v", entries)
	}
}
