package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

// ServerEvidenceKeys is the --json shape of `reeve server keys`.
type ServerEvidenceKeys struct {
	Rotated string              `json:"rotated,omitempty"` // the new current key id
	Keys    []ServerEvidenceKey `json:"keys"`              // current first
}

// ServerEvidenceKey is one public evidence signing key.
type ServerEvidenceKey struct {
	Kid    string `json:"kid"`
	Status string `json:"status"` // current or retired
	Alg    string `json:"alg"`
	X      string `json:"x"` // the Ed25519 public key, base64url
}

func newServerKeysCmd(e *Env) *cobra.Command {
	cmd := newGroupCmd("keys", "List and rotate the evidence signing keys (published at /api/.well-known/jwks.json)")
	cmd.AddCommand(newServerKeysSub(e, "list", "List the evidence signing keys, the current one first", false),
		newServerKeysSub(e, "rotate", "Make a new evidence signing key current; the old keys stay published so earlier bundles still verify", true))
	return cmd
}

func newServerKeysSub(e *Env, use, short string, rotate bool) *cobra.Command {
	o := &serverDBOptions{env: e}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: short + ".\nThe key set lives in the database, sealed under the master key of the data directory; every replica reads it from there,\n" +
			"so a rotation takes effect on all of them at once, running or not.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServerKeys(cmd.Context(), o, rotate) },
	}
	serverDBFlags(cmd, e, o)
	cmd.Flags().BoolVar(&o.json, "json", false, "print the keys as JSON")
	return cmd
}

func runServerKeys(ctx context.Context, o *serverDBOptions, rotate bool) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if o.env.Programs.Server.EvidenceKeys == nil {
		return exitf(ExitFailure, "this build of reeve has no control plane")
	}
	res, err := o.env.Programs.Server.EvidenceKeys(ctx, o.request(), rotate)
	if err != nil {
		return dbError(err)
	}
	if o.json {
		return writeJSON(o.env.Out, res)
	}
	if res.Rotated != "" {
		fmt.Fprintf(o.env.Err, "rotated: %s signs from now on\n", res.Rotated)
	}
	for _, k := range res.Keys {
		if _, err := fmt.Fprintf(o.env.Out, "%s\t%s\t%s\n", k.Kid, k.Status, k.Alg); err != nil {
			return err
		}
	}
	return nil
}
