package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// startFlags declares the flags the way `reeve start` does, so Load is
// tested against real pflag types (string slices, bools, ints).
func startFlags(t *testing.T, args ...string) *pflag.FlagSet {
	t.Helper()
	fs := pflag.NewFlagSet("start", pflag.ContinueOnError)
	fs.String("home", "", "")
	fs.String("config", "", "")
	fs.String("listen", DefaultListen, "")
	fs.String("profile", DefaultProfile, "")
	fs.StringSlice("allowed-hosts", nil, "")
	fs.StringSlice("allowed-origins", nil, "")
	fs.Bool("auth", false, "")
	fs.String("default-agent", "", "")
	fs.Int("hook-timeout-seconds", DefaultHookTimeoutSeconds, "")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fs
}

func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func noUserHome() (string, error) { return "", errors.New("no user home in tests") }

func TestLoadPrecedencePerKey(t *testing.T) {
	tests := []struct {
		key      string
		file     string   // YAML line setting the key
		env      string   // REEVE_<KEY> value
		flag     []string // command-line arguments
		get      func(Settings) any
		def      any
		fromFile any
		fromEnv  any
		fromFlag any
	}{
		{"listen", "listen: 127.0.0.1:8001", "127.0.0.1:8002", []string{"--listen", "127.0.0.1:8003"},
			func(s Settings) any { return s.Listen }, DefaultListen, "127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8003"},
		{"profile", "profile: lan", "relay", []string{"--profile=local"},
			func(s Settings) any { return s.Profile }, "local", "lan", "relay", "local"},
		{"allowed_hosts", "allowed_hosts: [file.example]", "env1.example, env2.example", []string{"--allowed-hosts", "flag1.example,flag2.example", "--allowed-hosts", "flag3.example"},
			func(s Settings) any { return s.AllowedHosts }, []string{}, []string{"file.example"}, []string{"env1.example", "env2.example"}, []string{"flag1.example", "flag2.example", "flag3.example"}},
		{"allowed_origins", "allowed_origins: [https://file.example]", "https://env.example", []string{"--allowed-origins=https://flag.example"},
			func(s Settings) any { return s.AllowedOrigins }, []string{}, []string{"https://file.example"}, []string{"https://env.example"}, []string{"https://flag.example"}},
		{"auth", "auth: true", "false", []string{"--auth"},
			func(s Settings) any { return s.Auth }, false, true, false, true},
		{"default_agent", "default_agent: codex", "gemini", []string{"--default-agent", "claude"},
			func(s Settings) any { return s.DefaultAgent }, "", "codex", "gemini", "claude"},
		{"hook_timeout_seconds", "hook_timeout_seconds: 30", "45", []string{"--hook-timeout-seconds", "60"},
			func(s Settings) any { return s.HookTimeoutSeconds }, 600, 30, 45, 60},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			home := t.TempDir()
			file := writeFile(t, "config.yaml", tt.file+"\n")
			env := map[string]string{"REEVE_HOME": home}
			stages := []struct {
				name   string
				file   bool
				env    bool
				flag   bool
				want   any
				source Source
			}{
				{"default", false, false, false, tt.def, SourceDefault},
				{"file", true, false, false, tt.fromFile, SourceFile},
				{"env", true, true, false, tt.fromEnv, SourceEnv},
				{"flag", true, true, true, tt.fromFlag, SourceFlag},
			}
			for _, st := range stages {
				env := map[string]string{"REEVE_HOME": env["REEVE_HOME"]}
				if st.file {
					env["REEVE_CONFIG"] = file
				}
				if st.env {
					env[EnvName(tt.key)] = tt.env
				}
				var args []string
				if st.flag {
					args = tt.flag
				}
				r, err := Load(LoadOptions{Flags: startFlags(t, args...), Getenv: envMap(env), UserHomeDir: noUserHome})
				if err != nil {
					t.Fatalf("%s: %v", st.name, err)
				}
				if got := tt.get(r.Settings); !reflect.DeepEqual(got, st.want) {
					t.Errorf("%s: %s = %#v, want %#v", st.name, tt.key, got, st.want)
				}
				if got := r.Sources[tt.key]; got != st.source {
					t.Errorf("%s: source of %s = %q, want %q", st.name, tt.key, got, st.source)
				}
			}
		})
	}
}

// A flag the user did not pass keeps its declared default, which must not
// hide a value from the environment or the file.
func TestLoadUnchangedFlagsDoNotOverride(t *testing.T) {
	file := writeFile(t, "config.yaml", "listen: 127.0.0.1:9001\nauth: true\nhook_timeout_seconds: 5\n")
	env := envMap(map[string]string{"REEVE_HOME": t.TempDir(), "REEVE_CONFIG": file, "REEVE_PROFILE": "lan"})
	r, err := Load(LoadOptions{Flags: startFlags(t), Getenv: env, UserHomeDir: noUserHome})
	if err != nil {
		t.Fatal(err)
	}
	s := r.Settings
	if s.Listen != "127.0.0.1:9001" || !s.Auth || s.HookTimeoutSeconds != 5 || s.Profile != "lan" {
		t.Errorf("settings = %+v; unchanged flag defaults won over env/file", s)
	}
	for key, want := range map[string]Source{"listen": SourceFile, "auth": SourceFile, "hook_timeout_seconds": SourceFile, "profile": SourceEnv, "default_agent": SourceDefault} {
		if r.Sources[key] != want {
			t.Errorf("source of %s = %q, want %q", key, r.Sources[key], want)
		}
	}
	if r.File != file {
		t.Errorf("File = %q, want %q", r.File, file)
	}
}

// An explicitly given empty list clears the lower layers' list.
func TestLoadListenPortAsNumber(t *testing.T) {
	file := writeFile(t, "config.yaml", "listen: 7171\n")
	r, err := Load(LoadOptions{Getenv: envMap(map[string]string{"REEVE_HOME": t.TempDir(), "REEVE_CONFIG": file}), UserHomeDir: noUserHome})
	if err != nil {
		t.Fatal(err)
	}
	if r.Settings.Listen != "7171" || r.Sources["listen"] != SourceFile {
		t.Errorf("listen = %q from %s, want \"7171\" from file", r.Settings.Listen, r.Sources["listen"])
	}
}

func TestLoadFlagClearsList(t *testing.T) {
	file := writeFile(t, "config.yaml", "allowed_hosts: [a.example]\n")
	env := envMap(map[string]string{"REEVE_HOME": t.TempDir(), "REEVE_CONFIG": file})
	r, err := Load(LoadOptions{Flags: startFlags(t, "--allowed-hosts="), Getenv: env, UserHomeDir: noUserHome})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Settings.AllowedHosts) != 0 || r.Sources["allowed_hosts"] != SourceFlag {
		t.Errorf("allowed_hosts = %q from %s, want [] from flag", r.Settings.AllowedHosts, r.Sources["allowed_hosts"])
	}
}

func TestLoadEnvLists(t *testing.T) {
	for in, want := range map[string][]string{
		"a":                    {"a"},
		"a,b":                  {"a", "b"},
		" a , b ,, c ,":        {"a", "b", "c"},
		",":                    {},
		"h.example:8080,[::1]": {"h.example:8080", "[::1]"},
	} {
		r, err := Load(LoadOptions{Getenv: envMap(map[string]string{"REEVE_HOME": t.TempDir(), "REEVE_ALLOWED_ORIGINS": in}), UserHomeDir: noUserHome})
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		if !reflect.DeepEqual(r.Settings.AllowedOrigins, want) {
			t.Errorf("REEVE_ALLOWED_ORIGINS=%q gave %q, want %q", in, r.Settings.AllowedOrigins, want)
		}
	}
}

// A list flag declared as a plain string (not a slice) is split the same way.
func TestLoadPlainStringListFlag(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.String("allowed-hosts", "", "")
	if err := fs.Parse([]string{"--allowed-hosts", "a.example, b.example"}); err != nil {
		t.Fatal(err)
	}
	r, err := Load(LoadOptions{Flags: fs, Getenv: envMap(map[string]string{"REEVE_HOME": t.TempDir()}), UserHomeDir: noUserHome})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a.example", "b.example"}; !reflect.DeepEqual(r.Settings.AllowedHosts, want) {
		t.Errorf("allowed_hosts = %q, want %q", r.Settings.AllowedHosts, want)
	}
}

func TestLoadDefaults(t *testing.T) {
	home := t.TempDir()
	r, err := Load(LoadOptions{Getenv: envMap(map[string]string{"REEVE_HOME": home}), UserHomeDir: noUserHome})
	if err != nil {
		t.Fatal(err)
	}
	want := Settings{
		Home: home, ConfigFile: filepath.Join(home, "config.yaml"), Listen: "127.0.0.1:7070", Profile: "local",
		AllowedHosts: []string{}, AllowedOrigins: []string{}, Auth: false, DefaultAgent: "", HookTimeoutSeconds: 600, DefaultMode: "detect", SessionUpload: "redacted",
	}
	if !reflect.DeepEqual(r.Settings, want) {
		t.Errorf("settings = %+v\nwant %+v", r.Settings, want)
	}
	if r.File != "" {
		t.Errorf("File = %q, want none (no config file in the home)", r.File)
	}
	for _, k := range Keys() {
		want := SourceDefault
		if k == KeyHome {
			want = SourceEnv
		}
		if r.Sources[k] != want {
			t.Errorf("source of %s = %q, want %q", k, r.Sources[k], want)
		}
	}
}

func TestLoadHomeAndConfigLocation(t *testing.T) {
	t.Run("xdg state home", func(t *testing.T) {
		r, err := Load(LoadOptions{Getenv: envMap(map[string]string{"XDG_STATE_HOME": "/var/state"}), UserHomeDir: noUserHome})
		if err != nil {
			t.Fatal(err)
		}
		if r.Settings.Home != "/var/state/reeve" || r.Sources[KeyHome] != SourceDefault {
			t.Errorf("home = %q (%s), want /var/state/reeve (default)", r.Settings.Home, r.Sources[KeyHome])
		}
	})
	t.Run("user home", func(t *testing.T) {
		h, err := DefaultHome(envMap(map[string]string{"XDG_STATE_HOME": "relative/ignored"}), func() (string, error) { return "/home/u", nil })
		if err != nil || h != "/home/u/.reeve" {
			t.Errorf("DefaultHome = %q, %v; want /home/u/.reeve", h, err)
		}
	})
	t.Run("no home at all", func(t *testing.T) {
		_, err := Load(LoadOptions{Getenv: envMap(nil), UserHomeDir: noUserHome})
		if err == nil || !strings.Contains(err.Error(), "default daemon home") {
			t.Errorf("err = %v, want a default daemon home error", err)
		}
	})
	t.Run("flag beats env", func(t *testing.T) {
		flagHome, envHome := t.TempDir(), t.TempDir()
		writeFileAt(t, filepath.Join(flagHome, "config.yaml"), "profile: relay\n")
		writeFileAt(t, filepath.Join(envHome, "config.yaml"), "profile: lan\n")
		r, err := Load(LoadOptions{Flags: startFlags(t, "--home", flagHome), Getenv: envMap(map[string]string{"REEVE_HOME": envHome}), UserHomeDir: noUserHome})
		if err != nil {
			t.Fatal(err)
		}
		if r.Settings.Home != flagHome || r.Sources[KeyHome] != SourceFlag || r.Settings.Profile != "relay" || r.File != filepath.Join(flagHome, "config.yaml") {
			t.Errorf("home %q (%s), profile %q, file %q; want the flag's home and its config file", r.Settings.Home, r.Sources[KeyHome], r.Settings.Profile, r.File)
		}
	})
	t.Run("config flag beats env", func(t *testing.T) {
		a := writeFile(t, "a.yaml", "profile: relay\n")
		b := writeFile(t, "b.json", `{"profile": "lan"}`)
		r, err := Load(LoadOptions{Flags: startFlags(t, "--config", b), Getenv: envMap(map[string]string{"REEVE_HOME": t.TempDir(), "REEVE_CONFIG": a}), UserHomeDir: noUserHome})
		if err != nil {
			t.Fatal(err)
		}
		if r.File != b || r.Sources[KeyConfigFile] != SourceFlag || r.Settings.Profile != "lan" {
			t.Errorf("file %q (%s), profile %q; want %s (flag), lan", r.File, r.Sources[KeyConfigFile], r.Settings.Profile, b)
		}
	})
	t.Run("relative paths become absolute", func(t *testing.T) {
		r, err := Load(LoadOptions{Getenv: envMap(map[string]string{"REEVE_HOME": "rel-home"}), UserHomeDir: noUserHome})
		if err != nil {
			t.Fatal(err)
		}
		if !filepath.IsAbs(r.Settings.Home) || !filepath.IsAbs(r.Settings.ConfigFile) {
			t.Errorf("home %q, config %q; want absolute paths", r.Settings.Home, r.Settings.ConfigFile)
		}
	})
}

func writeFileAt(t *testing.T, path, content string) {
	t.Helper()
	if err := writeFileErr(path, content); err != nil {
		t.Fatal(err)
	}
}

func TestLoadErrors(t *testing.T) {
	home := t.TempDir()
	t.Run("missing explicit config file", func(t *testing.T) {
		missing := filepath.Join(home, "nope.yaml")
		_, err := Load(LoadOptions{Flags: startFlags(t, "--config", missing), Getenv: envMap(map[string]string{"REEVE_HOME": home}), UserHomeDir: noUserHome})
		if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "--config") {
			t.Errorf("err = %v, want fs.ErrNotExist naming --config", err)
		}
		_, err = Load(LoadOptions{Getenv: envMap(map[string]string{"REEVE_HOME": home, "REEVE_CONFIG": missing}), UserHomeDir: noUserHome})
		if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "REEVE_CONFIG") {
			t.Errorf("err = %v, want fs.ErrNotExist naming REEVE_CONFIG", err)
		}
	})
	t.Run("invalid file lists every problem", func(t *testing.T) {
		file := writeFile(t, "config.yaml", "profile: open\nauth: 1\nnope: true\n")
		_, err := Load(LoadOptions{Getenv: envMap(map[string]string{"REEVE_HOME": home, "REEVE_CONFIG": file}), UserHomeDir: noUserHome})
		var fe *FileError
		if !errors.As(err, &fe) {
			t.Fatalf("err = %v, want *FileError", err)
		}
		if len(fe.Problems) != 3 {
			t.Fatalf("got %d problems, want 3: %v", len(fe.Problems), err)
		}
		for _, frag := range []string{file + ":1:10: /profile:", file + ":2:7: /auth:", file + ":3:1: /nope:"} {
			if !strings.Contains(err.Error(), frag) {
				t.Errorf("error %q lacks %q", err, frag)
			}
		}
	})
	for _, tt := range []struct {
		name   string
		env    map[string]string
		args   []string
		origin string
		want   string
	}{
		{"bad env bool", map[string]string{"REEVE_AUTH": "yes please"}, nil, "REEVE_AUTH", "not a boolean"},
		{"bad env int", map[string]string{"REEVE_HOOK_TIMEOUT_SECONDS": "10s"}, nil, "REEVE_HOOK_TIMEOUT_SECONDS", "not an integer"},
		{"env int below minimum", map[string]string{"REEVE_HOOK_TIMEOUT_SECONDS": "0"}, nil, "REEVE_HOOK_TIMEOUT_SECONDS", "at least 1"},
		{"bad env profile", map[string]string{"REEVE_PROFILE": "public"}, nil, "REEVE_PROFILE", `must be one of "local", "lan", "relay"`},
		{"bad env listen", map[string]string{"REEVE_LISTEN": ":99999"}, nil, "REEVE_LISTEN", "out of range"},
		{"bad flag listen", nil, []string{"--listen", "abc"}, "--listen", "missing port"},
		{"bad flag profile", nil, []string{"--profile", "wan"}, "--profile", "must be one of"},
		{"empty home flag", nil, []string{"--home="}, "--home", "path is empty"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"REEVE_HOME": home}
			for k, v := range tt.env {
				env[k] = v
			}
			_, err := Load(LoadOptions{Flags: startFlags(t, tt.args...), Getenv: envMap(env), UserHomeDir: noUserHome})
			var se *SettingError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want *SettingError", err)
			}
			if se.Origin != tt.origin || !strings.HasPrefix(err.Error(), tt.origin+": ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %q (origin %q), want %q naming %s", err, se.Origin, tt.want, tt.origin)
			}
		})
	}
}

// The file cannot move the home: the home decides where the file is.
func TestLoadHomeNotFromFile(t *testing.T) {
	home := t.TempDir()
	writeFileAt(t, filepath.Join(home, "config.yaml"), "home: /somewhere/else\n")
	_, err := Load(LoadOptions{Getenv: envMap(map[string]string{"REEVE_HOME": home}), UserHomeDir: noUserHome})
	var fe *FileError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "use --home or REEVE_HOME") {
		t.Errorf("err = %v, want a file error about home", err)
	}
}

func writeFileErr(path, content string) error { return os.WriteFile(path, []byte(content), 0o600) }

func TestDefaultHomeNilFuncs(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "/xdg/state")
	h, err := DefaultHome(nil, nil)
	if err != nil || h != "/xdg/state/reeve" {
		t.Errorf("DefaultHome(nil, nil) = %q, %v; want /xdg/state/reeve from the process environment", h, err)
	}
}
