package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/internal/redact"
	"reeve.dev/reeve/internal/version"
	"reeve.dev/reeve/worker"
)

type diagnosticOptions struct {
	daemonCmd
	json bool
}

// diagnosticSnapshot is `reeve diagnostic --json`: what a support person
// needs to place a machine, with every secret-looking value masked. It
// holds no prompt, event or file content.
type diagnosticSnapshot struct {
	GeneratedAt time.Time          `json:"generated_at"`
	Version     string             `json:"version"`
	OS          string             `json:"os"`
	Arch        string             `json:"arch"`
	GoVersion   string             `json:"go_version"`
	Hostname    string             `json:"hostname"`
	Home        string             `json:"home"`
	Daemon      diagnosticDaemon   `json:"daemon"`
	Launch      any                `json:"launch,omitempty"`
	Pairing     any                `json:"pairing,omitempty"`
	Workers     []diagnosticWorker `json:"workers"`
	Environment map[string]string  `json:"environment"`
	Files       []diagnosticFile   `json:"files"`
	Redacted    []string           `json:"redacted"`
}

type diagnosticDaemon struct {
	Running bool   `json:"running"`
	Health  any    `json:"health,omitempty"`
	Error   string `json:"error,omitempty"`
}

type diagnosticWorker struct {
	Profile     string `json:"profile"`
	Home        string `json:"home"`
	ProcessLock string `json:"processLock"`
	PID         int    `json:"pid,omitempty"`
	Settings    any    `json:"settings,omitempty"`
	Identity    any    `json:"identity,omitempty"`
}

type diagnosticFile struct {
	Name string `json:"name"`
	Mode string `json:"mode"`
	Size int64  `json:"size"`
}

func newDiagnosticCmd(env *Env) *cobra.Command {
	o := &diagnosticOptions{}
	cmd := &cobra.Command{
		Use:   "diagnostic",
		Short: "Print a sanitized support snapshot: versions, daemon health, pairing, worker profiles (secret-looking fields redacted)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.bind(cmd, env); err != nil {
				return err
			}
			return runDiagnostic(cmd.Context(), o)
		},
	}
	cmd.Flags().BoolVar(&o.json, "json", false, "print the snapshot as JSON")
	return cmd
}

// secretKey reports whether a field name says its value is a secret:
// such values are dropped whatever they look like.
func secretKey(k string) bool {
	k = strings.ToLower(k)
	for _, w := range []string{"token", "secret", "password", "credential", "key", "cookie", "authorization"} {
		if strings.Contains(k, w) && !strings.HasSuffix(k, "_in") && !strings.HasSuffix(k, "_file") && !strings.HasSuffix(k, "_source") && !strings.HasSuffix(k, "file") {
			return true
		}
	}
	return false
}

// sanitize masks secret-named fields and then secret-shaped values.
func sanitize(v any, path string, redacted *[]string) any {
	switch t := v.(type) {
	case map[string]any:
		for k, val := range t {
			p := path + "." + k
			if secretKey(k) {
				if s, ok := val.(string); ok && s == "" {
					continue
				}
				t[k] = redact.Mask
				*redacted = append(*redacted, strings.TrimPrefix(p, "."))
				continue
			}
			t[k] = sanitize(val, p, redacted)
		}
		return t
	case []any:
		for i := range t {
			t[i] = sanitize(t[i], fmt.Sprintf("%s[%d]", path, i), redacted)
		}
		return t
	case string:
		if m := redact.String(t); m != t {
			*redacted = append(*redacted, strings.TrimPrefix(path, "."))
			return m
		}
	}
	return v
}

// loadJSONFile decodes a JSON file of the home generically, or nil.
func loadJSONFile(path string) any {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var v any
	if json.Unmarshal(b, &v) != nil {
		return map[string]any{"unreadable": true}
	}
	return v
}

func runDiagnostic(ctx context.Context, o *diagnosticOptions) error {
	dir := o.home
	host, _ := os.Hostname()
	s := diagnosticSnapshot{
		GeneratedAt: time.Now().UTC(), Version: version.Version, OS: runtime.GOOS, Arch: runtime.GOARCH,
		GoVersion: runtime.Version(), Hostname: host, Home: string(dir), Workers: []diagnosticWorker{},
		Environment: map[string]string{}, Files: []diagnosticFile{},
	}
	var redacted []string
	locked, _ := dir.Locked()
	if locked {
		// A snapshot is for a machine in trouble: a daemon that does not
		// answer gets 5 s, not the usual call timeout.
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		c, err := o.connect(hctx)
		if err == nil {
			h, herr := c.Health(hctx)
			c.Close()
			if herr == nil {
				s.Daemon.Running = true
				var hv any
				b, _ := json.Marshal(h)
				json.Unmarshal(b, &hv)
				s.Daemon.Health = sanitize(hv, "daemon.health", &redacted)
			} else {
				s.Daemon.Error = herr.Error()
			}
		} else {
			s.Daemon.Error = err.Error()
		}
		cancel()
	} else {
		s.Daemon.Error = "no daemon is running from this home"
	}
	// Files are read raw (not through the keychain) so a secret kept in
	// the OS keychain is never fetched for a snapshot.
	if v := loadJSONFile(dir.LaunchFile()); v != nil {
		s.Launch = sanitize(v, "launch", &redacted)
	}
	if v := loadJSONFile(dir.RelayFile()); v != nil {
		s.Pairing = sanitize(v, "pairing", &redacted)
	}
	profiles, _ := filepath.Glob(filepath.Join(string(dir), "workers", "*"))
	for _, p := range profiles {
		h := worker.Home{Base: string(dir), Profile: filepath.Base(p)}
		st, _ := h.LockState()
		w := diagnosticWorker{Profile: h.Profile, Home: h.Dir(), ProcessLock: st.State, PID: st.PID}
		if v := loadJSONFile(h.ProfileFile()); v != nil {
			w.Settings = sanitize(v, "workers."+h.Profile+".settings", &redacted)
		}
		if v := loadJSONFile(h.IdentityFile()); v != nil {
			w.Identity = v
		}
		s.Workers = append(s.Workers, w)
	}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "REEVE_") {
			continue
		}
		if secretKey(k) {
			s.Environment[k] = redact.Mask
			redacted = append(redacted, "environment."+k)
			continue
		}
		if m := redact.String(v); m != v {
			redacted = append(redacted, "environment."+k)
			v = m
		}
		s.Environment[k] = v
	}
	if entries, err := os.ReadDir(string(dir)); err == nil {
		for _, e := range entries {
			if fi, err := e.Info(); err == nil {
				s.Files = append(s.Files, diagnosticFile{Name: e.Name(), Mode: fi.Mode().String(), Size: fi.Size()})
			}
		}
	}
	sort.Strings(redacted)
	s.Redacted = append([]string{}, redacted...)
	if o.json {
		return writeJSON(o.env.Out, s)
	}
	fmt.Fprintf(o.env.Out, "reeve %s on %s/%s, home %s\n", s.Version, s.OS, s.Arch, s.Home)
	switch {
	case s.Daemon.Running:
		fmt.Fprintln(o.env.Out, "daemon: running")
	case locked:
		fmt.Fprintf(o.env.Out, "daemon: running but not answering (%s)\n", s.Daemon.Error)
	default:
		fmt.Fprintf(o.env.Out, "daemon: not running (%s)\n", s.Daemon.Error)
	}
	fmt.Fprintf(o.env.Out, "paired: %v; worker profiles: %d; redacted fields: %d\n", s.Pairing != nil, len(s.Workers), len(s.Redacted))
	return nil
}
