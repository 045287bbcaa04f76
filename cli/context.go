package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/contextvault"
	"reeve.dev/reeve/internal/keystore"
	"reeve.dev/reeve/server/sdk"
)

// `reeve context`: the encrypted team memory (docs/context-vault.md).
// Every command acts as this machine's device: its key is in the key store
// of the daemon home, and it speaks to the paired control plane with the
// machine's issue token.

// contextOptions are the flags every context command shares; each command
// adds its own.
type contextOptions struct {
	// daemonCmd holds the home, resolved before the command runs.
	daemonCmd
	keyStore string
	json     bool

	// open builds the vault; tests replace it to use a server of their own.
	open func(o *contextOptions, online bool) (*contextvault.Vault, error)
}

func newContextCmd(env *Env) *cobra.Command {
	cmd := newGroupCmd("context", "The context vault: end-to-end-encrypted team memory that agents use")
	cmd.Long = "The context vault keeps a team's conventions, decisions and knowledge as small markdown entries, sealed on\n" +
		"each device and synced through the control plane, which cannot read them. Sessions get the entries relevant to\n" +
		"their task. See docs/context-vault.md."
	cmd.AddCommand(contextCommands(env)...)
	return cmd
}

// contextCommand builds one context command: shared flags, then run.
func contextCommand(env *Env, use, short string, args cobra.PositionalArgs, json bool, flags func(*contextOptions, *cobra.Command), run func(ctx context.Context, o *contextOptions, args []string) error) *cobra.Command {
	o := &contextOptions{daemonCmd: daemonCmd{env: env}, open: openContextVault}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  usageArgs(args),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := o.bind(cmd, env); err != nil {
				return contextExit(err)
			}
			return contextExit(run(cmd.Context(), o, a))
		},
	}
	cmd.Flags().StringVar(&o.keyStore, "key-store", "", "where this device's private key is: file (0600, in the home) or keychain (the OS keychain); default: what init chose, else file")
	if json {
		cmd.Flags().BoolVar(&o.json, "json", false, "print the result as JSON")
	}
	if flags != nil {
		flags(o, cmd)
	}
	return cmd
}

// openContextVault opens this home's vault, with the paired control plane
// when online.
func openContextVault(o *contextOptions, online bool) (*contextvault.Vault, error) {
	dir := o.home
	if err := dir.Prepare(); err != nil {
		return nil, withExit(ExitFailure, err)
	}
	switch o.keyStore {
	case "", keystore.KindFile, keystore.KindKeychain:
	default:
		return nil, exitf(ExitUsage, "--key-store must be file or keychain, got %q", o.keyStore)
	}
	opts := contextvault.Options{Home: string(dir), KeyStore: o.keyStore, Log: progress{o.env.Err}}
	if online {
		rc, err := dir.ReadRelayCredentials()
		if errors.Is(err, fs.ErrNotExist) {
			return nil, exitf(ExitUsage, "this machine is not paired with a control plane: run `%s` first", o.reeve("pair --server URL"))
		}
		if err != nil {
			return nil, withExit(ExitFailure, fmt.Errorf("read the pairing: %w", err))
		}
		opts.Server = &sdk.ContextClient{Client: &sdk.Client{BaseURL: rc.ServerURL, Token: rc.IssueToken, HTTP: &http.Client{Timeout: 60 * time.Second}}, WorkspaceID: rc.WorkspaceID}
	}
	v, err := contextvault.Open(opts)
	if err != nil {
		return nil, withExit(ExitUsage, err)
	}
	return v, nil
}

// with opens the vault, runs fn and closes it.
func (o *contextOptions) with(online bool, fn func(v *contextvault.Vault) error) error {
	v, err := o.open(o, online)
	if err != nil {
		return err
	}
	defer v.Close()
	return fn(v)
}

// contextDo opens the vault, runs fn and prints what it answers: JSON with
// --json, else human.
func contextDo[T any](o *contextOptions, online bool, fn func(v *contextvault.Vault) (T, error), human func(w io.Writer, r T)) error {
	return o.with(online, func(v *contextvault.Vault) error {
		r, err := fn(v)
		if err != nil {
			return err
		}
		return o.print(r, func(w io.Writer) { human(w, r) })
	})
}

// print writes v as JSON with --json, else the human form.
func (o *contextOptions) print(v any, human func(w io.Writer)) error {
	if o.json {
		return writeJSON(o.env.Out, v)
	}
	human(o.env.Out)
	return nil
}

// progress prefixes the vault's progress lines for stderr.
type progress struct{ w io.Writer }

func (p progress) Write(b []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		fmt.Fprintf(p.w, "reeve: %s\n", line)
	}
	return len(b), nil
}

// contextExit maps the vault's errors to exit codes.
func contextExit(err error) error {
	if err == nil {
		return nil
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return err
	}
	var ae *sdk.APIError
	if errors.As(err, &ae) {
		switch {
		case ae.Status == http.StatusUnauthorized || ae.Status == http.StatusForbidden:
			return withExit(ExitDenied, err)
		case ae.Status == http.StatusNotFound:
			return withExit(ExitNotFound, err)
		case ae.Status == http.StatusConflict:
			return withExit(ExitConflict, err)
		case ae.Status == http.StatusUnprocessableEntity:
			return withExit(ExitUsage, err)
		}
		return withExit(ExitFailure, err)
	}
	switch {
	case errors.Is(err, contextvault.ErrUnconfirmed):
		return withExit(ExitUsage, err)
	case errors.Is(err, contextvault.ErrDenied):
		return withExit(ExitDenied, err)
	case errors.Is(err, contextvault.ErrNotFound), errors.Is(err, contextvault.ErrNoKey), errors.Is(err, contextvault.ErrNoDevice):
		return withExit(ExitNotFound, err)
	case errors.Is(err, contextvault.ErrRefused):
		return withExit(ExitConflict, err)
	case errors.Is(err, contextvault.ErrNotPaired):
		return withExit(ExitUsage, err)
	}
	return withExit(ExitFailure, err)
}

// readBody reads an entry's body from a file, or from stdin for "-" or
// no file.
func readBody(env *Env, path string) (string, error) {
	var b []byte
	var err error
	if path == "" || path == "-" {
		b, err = io.ReadAll(io.LimitReader(env.In, 256<<10+1))
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return "", exitf(ExitNotFound, "read the entry: %v", err)
	}
	if len(b) > 256<<10 {
		return "", exitf(ExitUsage, "an entry is at most 256 KiB; keep entries small and split larger knowledge")
	}
	return string(b), nil
}

// argOr is the first positional argument, or def.
func argOr(args []string, def string) string {
	if len(args) > 0 {
		return args[0]
	}
	return def
}

// secretArg reads a secret given as a flag value, or from stdin when the
// value is "-" (so it stays out of the process list).
func secretArg(env *Env, v, flag string) (string, error) {
	if v != "-" {
		return v, nil
	}
	b, err := io.ReadAll(io.LimitReader(env.In, 4096))
	if err != nil {
		return "", exitf(ExitUsage, "read %s from stdin: %v", flag, err)
	}
	return strings.TrimSpace(string(b)), nil
}
