package config

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// LoadOptions are the inputs of Load. Everything is injectable so tests (and
// `reeve config resolve --home`) do not depend on the process environment.
type LoadOptions struct {
	// Flags may be nil. Flags are named like the keys with dashes
	// (--allowed-hosts, --home, --config, ...); only flags the user Changed
	// count, so a flag left at its default never hides env or file values.
	Flags       *pflag.FlagSet
	Getenv      func(string) string    // nil = os.Getenv
	UserHomeDir func() (string, error) // nil = os.UserHomeDir
}

func (o LoadOptions) getenv() func(string) string {
	if o.Getenv != nil {
		return o.Getenv
	}
	return os.Getenv
}

func (o LoadOptions) userHome() func() (string, error) {
	if o.UserHomeDir != nil {
		return o.UserHomeDir
	}
	return os.UserHomeDir
}

// SettingError is a flag or environment value that cannot be used.
type SettingError struct {
	Key    string
	Source Source // SourceFlag or SourceEnv
	Origin string // the flag or variable as the user wrote it: "--listen", "REEVE_LISTEN"
	Err    error
}

func (e *SettingError) Error() string { return e.Origin + ": " + e.Err.Error() }
func (e *SettingError) Unwrap() error { return e.Err }

// Locate finds the daemon home and the config file path without reading the
// file. The home comes only from --home, REEVE_HOME or the default, never from
// the file, because the file's default location is inside the home.
func Locate(opts LoadOptions) (home string, homeSrc Source, file string, fileSrc Source, err error) {
	home, homeSrc, err = pathSetting(opts, KeyHome)
	if err != nil {
		return "", "", "", "", err
	}
	if homeSrc == SourceDefault {
		if home, err = DefaultHome(opts.getenv(), opts.userHome()); err != nil {
			return "", "", "", "", err
		}
	}
	file, fileSrc, err = pathSetting(opts, KeyConfigFile)
	if err != nil {
		return "", "", "", "", err
	}
	if fileSrc == SourceDefault {
		file = filepath.Join(home, DefaultConfigName)
	}
	return home, homeSrc, file, fileSrc, nil
}

// pathSetting reads a path-valued key from a changed flag or the environment,
// made absolute because the daemon's processes may run from another
// directory. SourceDefault with "" means neither was set.
func pathSetting(opts LoadOptions, key string) (string, Source, error) {
	raw, src, origin := "", SourceDefault, ""
	if f := lookupFlag(opts.Flags, key); f != nil {
		raw, src, origin = f.Value.String(), SourceFlag, "--"+f.Name
	} else if v := opts.getenv()(EnvName(key)); v != "" {
		raw, src, origin = v, SourceEnv, EnvName(key)
	} else {
		return "", SourceDefault, nil
	}
	if strings.TrimSpace(raw) == "" {
		return "", "", &SettingError{Key: key, Source: src, Origin: origin, Err: errors.New("path is empty")}
	}
	abs, err := filepath.Abs(raw)
	if err != nil {
		return "", "", &SettingError{Key: key, Source: src, Origin: origin, Err: fmt.Errorf("resolve path: %w", err)}
	}
	return abs, src, nil
}

// lookupFlag returns the flag of key only if the user set it.
func lookupFlag(fs *pflag.FlagSet, key string) *pflag.Flag {
	if fs == nil {
		return nil
	}
	f := fs.Lookup(FlagName(key))
	if f == nil || !f.Changed {
		return nil
	}
	return f
}

// Load resolves the settings with precedence flags > REEVE_* environment >
// config file > defaults, validating the file against the v1 schema.
//
// Errors: *FileError when the file has problems (all of them listed),
// *SettingError for an unusable flag or environment value, and an error
// wrapping fs.ErrNotExist when a config file named by --config or
// REEVE_CONFIG does not exist (a missing default file is fine).
func Load(opts LoadOptions) (*Resolved, error) {
	home, homeSrc, file, fileSrc, err := Locate(opts)
	if err != nil {
		return nil, err
	}
	r := &Resolved{Sources: map[string]Source{KeyHome: homeSrc, KeyConfigFile: fileSrc}}

	// Each layer lands in its own viper layer so viper's precedence decides:
	// defaults, the config map, the pflag layer and the override layer. The
	// environment goes through the pflag layer rather than viper's own env
	// lookup because viper reads os.Getenv directly, which LoadOptions must
	// be able to replace; real flags therefore go in the override layer,
	// which sits above it. Values are parsed strictly here first, because
	// viper's casts turn a bad value into a silent zero.
	v := viper.New()
	for _, s := range settings {
		v.SetDefault(s.key, s.def)
		r.Sources[s.key] = SourceDefault
	}

	fileValues, err := loadFile(file)
	switch {
	case err == nil:
		r.File = file
		if err := v.MergeConfigMap(fileValues); err != nil {
			return nil, fmt.Errorf("merge config file %s: %w", file, err)
		}
		for k := range fileValues {
			r.Sources[k] = SourceFile
		}
	case errors.Is(err, fs.ErrNotExist) && fileSrc == SourceDefault:
		// No config file at the default place: defaults, env and flags only.
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("config file %s (set by %s): %w", file, originOf(fileSrc, KeyConfigFile), fs.ErrNotExist)
	default:
		return nil, err
	}

	getenv := opts.getenv()
	for _, s := range settings {
		raw := getenv(EnvName(s.key))
		if raw == "" {
			// Unset and empty are the same: Getenv cannot tell them apart.
			continue
		}
		val, err := parseValue(s, raw)
		if err != nil {
			return nil, &SettingError{Key: s.key, Source: SourceEnv, Origin: EnvName(s.key), Err: err}
		}
		if err := v.BindFlagValue(s.key, envValue{name: EnvName(s.key), kind: s.kind, val: val}); err != nil {
			return nil, fmt.Errorf("bind %s: %w", EnvName(s.key), err)
		}
		r.Sources[s.key] = SourceEnv
	}

	for _, s := range settings {
		f := lookupFlag(opts.Flags, s.key)
		if f == nil {
			continue
		}
		val, err := flagValue(s, f)
		if err != nil {
			return nil, &SettingError{Key: s.key, Source: SourceFlag, Origin: "--" + f.Name, Err: err}
		}
		v.Set(s.key, val)
		r.Sources[s.key] = SourceFlag
	}

	r.Settings = Settings{
		Home:               home,
		ConfigFile:         file,
		Listen:             v.GetString("listen"),
		Profile:            v.GetString("profile"),
		AllowedHosts:       nonNil(v.GetStringSlice("allowed_hosts")),
		AllowedOrigins:     nonNil(v.GetStringSlice("allowed_origins")),
		Auth:               v.GetBool("auth"),
		DefaultAgent:       v.GetString("default_agent"),
		HookTimeoutSeconds: v.GetInt("hook_timeout_seconds"),
		DefaultMode:        v.GetString("default_mode"),
		SessionUpload:      v.GetString("session_upload"),
	}
	return r, nil
}

func originOf(src Source, key string) string {
	if src == SourceFlag {
		return "--" + FlagName(key)
	}
	return EnvName(key)
}

func nonNil(xs []string) []string {
	if xs == nil {
		return []string{}
	}
	return xs
}

// parseValue reads a flag or environment string strictly as the setting's
// type and runs its semantic check. Lists are comma-separated.
func parseValue(s setting, raw string) (any, error) {
	var val any
	switch s.kind {
	case kindString:
		val = raw
	case kindList:
		val = splitList([]string{raw})
	case kindBool:
		b, err := strconv.ParseBool(strings.TrimSpace(raw))
		if err != nil {
			return nil, fmt.Errorf("%q is not a boolean (use true or false)", raw)
		}
		val = b
	case kindInt:
		n, err := strconv.Atoi(strings.TrimSpace(raw))
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer", raw)
		}
		val = n
	}
	if s.check != nil {
		if err := s.check(val); err != nil {
			return nil, err
		}
	}
	return val, nil
}

// flagValue reads a changed flag. List flags may be declared as string
// slices, string arrays or plain strings by the command that owns them;
// all three end up as one comma-split list.
func flagValue(s setting, f *pflag.Flag) (any, error) {
	if s.kind == kindList {
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			return splitList(sv.GetSlice()), nil
		}
	}
	return parseValue(s, f.Value.String())
}

// splitList splits each item on commas, trims blanks and drops empty items,
// so "a, b,,c" and ["a", "b,c"] both give [a b c].
func splitList(items []string) []string {
	out := []string{}
	for _, it := range items {
		for _, part := range strings.Split(it, ",") {
			if p := strings.TrimSpace(part); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// envValue feeds an already parsed environment value to viper's pflag
// layer. ValueString is written in the form viper parses back for the
// ValueType it reports.
type envValue struct {
	name string
	kind kind
	val  any
}

func (e envValue) HasChanged() bool { return true }
func (e envValue) Name() string     { return e.name }

func (e envValue) ValueType() string {
	switch e.kind {
	case kindList:
		return "stringSlice"
	case kindBool:
		return "bool"
	case kindInt:
		return "int"
	}
	return "string"
}

func (e envValue) ValueString() string {
	switch v := e.val.(type) {
	case []string:
		var b strings.Builder
		w := csv.NewWriter(&b)
		_ = w.Write(v) // a strings.Builder cannot fail
		w.Flush()
		return "[" + strings.TrimSuffix(b.String(), "\n") + "]"
	case bool:
		return strconv.FormatBool(v)
	case int:
		return strconv.Itoa(v)
	case string:
		return v
	}
	return fmt.Sprint(e.val)
}
