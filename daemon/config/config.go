// Package config resolves the daemon's settings from flags, REEVE_*
// environment variables, the config file and defaults, in that order of
// precedence, and validates the config file against the versioned JSON Schema
// kept next to this code (config.v1.schema.json).
package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Settings is the effective daemon configuration.
type Settings struct {
	Home               string   `json:"home"`
	ConfigFile         string   `json:"config_file"`
	Listen             string   `json:"listen"`
	Profile            string   `json:"profile"`
	AllowedHosts       []string `json:"allowed_hosts"`
	AllowedOrigins     []string `json:"allowed_origins"`
	Auth               bool     `json:"auth"`
	DefaultAgent       string   `json:"default_agent"`
	DefaultMode        string   `json:"default_mode"`
	HookTimeoutSeconds int      `json:"hook_timeout_seconds"`
	SessionUpload      string   `json:"session_upload"`
}

// Source says which layer an effective value came from.
type Source string

// The layers, highest precedence first.
const (
	SourceFlag    Source = "flag"
	SourceEnv     Source = "env"
	SourceFile    Source = "file"
	SourceDefault Source = "default"
)

// Resolved is the outcome of Load: the settings, where each came from, and
// the config file that was read.
type Resolved struct {
	Settings Settings
	Sources  map[string]Source // key (snake_case) -> where the effective value came from
	File     string            // config file read, "" if none
}

// Profiles are the values of the profile setting.
var Profiles = []string{"local", "lan", "relay"}

// Defaults of the settings that have a fixed default (home depends on the
// user's environment; see DefaultHome).
const (
	DefaultListen             = "127.0.0.1:7070"
	DefaultProfile            = "local"
	DefaultHookTimeoutSeconds = 600
	// DefaultConfigName is the config file's name inside the home.
	DefaultConfigName = "config.yaml"
)

// Keys of the two settings that locate things rather than configure the
// daemon; they never come from the file.
const (
	KeyHome       = "home"
	KeyConfigFile = "config_file"
)

// kind is how a setting's value is typed and parsed from a string.
type kind int

const (
	kindString kind = iota
	kindList
	kindBool
	kindInt
)

// setting describes one key that may come from any layer, the file included.
type setting struct {
	key   string
	kind  kind
	def   any
	check func(v any) error // semantic check beyond the type; nil = none
}

// settings is the v1 key set in display order. The schema file must list the
// same keys (a test holds them together).
var settings = []setting{
	{key: "listen", kind: kindString, def: DefaultListen, check: checkListen},
	{key: "profile", kind: kindString, def: DefaultProfile, check: checkProfile},
	{key: "allowed_hosts", kind: kindList, def: []string{}},
	{key: "allowed_origins", kind: kindList, def: []string{}},
	{key: "auth", kind: kindBool, def: false},
	{key: "default_agent", kind: kindString, def: ""},
	{key: "hook_timeout_seconds", kind: kindInt, def: DefaultHookTimeoutSeconds, check: checkHookTimeout},
	{key: "default_mode", kind: kindString, def: DefaultMode, check: checkMode},
	{key: "session_upload", kind: kindString, def: DefaultSessionUpload, check: checkSessionUpload},
}

// SessionUploads are the values of session_upload: what a paired daemon
// publishes of its sessions to the control plane.
var SessionUploads = []string{"redacted", "full", "metadata", "off"}

// DefaultSessionUpload masks secret-looking values before upload.
const DefaultSessionUpload = "redacted"

func checkSessionUpload(v any) error {
	m := v.(string)
	for _, ok := range SessionUploads {
		if m == ok {
			return nil
		}
	}
	return fmt.Errorf("value must be one of %s, got %q", quoteList(SessionUploads), m)
}

// Keys lists every key Resolved.Sources reports, in display order.
func Keys() []string {
	keys := []string{KeyHome, KeyConfigFile}
	for _, s := range settings {
		keys = append(keys, s.key)
	}
	return keys
}

// EnvName is the environment variable of a key: REEVE_<KEY>, with
// config_file spelled REEVE_CONFIG to match its flag.
func EnvName(key string) string {
	if key == KeyConfigFile {
		return "REEVE_CONFIG"
	}
	return "REEVE_" + strings.ToUpper(key)
}

// FlagName is the command-line flag of a key: dashes for underscores, with
// config_file spelled --config.
func FlagName(key string) string {
	if key == KeyConfigFile {
		return "config"
	}
	return strings.ReplaceAll(key, "_", "-")
}

// DefaultHome is the per-user daemon home: $XDG_STATE_HOME/reeve when that is
// set to an absolute path (the XDG spec says to ignore a relative one), else
// ~/.reeve. A nil getenv or userHome means the process's own.
func DefaultHome(getenv func(string) string, userHome func() (string, error)) (string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if userHome == nil {
		userHome = os.UserHomeDir
	}
	if x := getenv("XDG_STATE_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "reeve"), nil
	}
	h, err := userHome()
	if err != nil {
		return "", fmt.Errorf("default daemon home: %w", err)
	}
	if h == "" {
		return "", errors.New("default daemon home: the user's home directory is unknown; set --home or REEVE_HOME")
	}
	return filepath.Join(h, ".reeve"), nil
}

func checkListen(v any) error {
	_, err := ParseListen(v.(string))
	return err
}

func checkProfile(v any) error {
	p := v.(string)
	for _, ok := range Profiles {
		if p == ok {
			return nil
		}
	}
	return fmt.Errorf("value must be one of %s, got %q", quoteList(Profiles), p)
}

// Modes are the values of default_mode: the operator mode of a session
// launched without one. Bypass only ever applies when the user chose it.
var Modes = []string{"detect", "bypass"}

// DefaultMode asks a human before an agent uses a tool.
const DefaultMode = "detect"

func checkMode(v any) error {
	m := v.(string)
	for _, ok := range Modes {
		if m == ok {
			return nil
		}
	}
	return fmt.Errorf("value must be one of %s, got %q", quoteList(Modes), m)
}

func checkHookTimeout(v any) error {
	if n := v.(int); n < 1 {
		return fmt.Errorf("must be at least 1, got %d", n)
	}
	return nil
}

func quoteList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = fmt.Sprintf("%q", x)
	}
	return strings.Join(q, ", ")
}
