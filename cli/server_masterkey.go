package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

// EnvMasterKeyFile locates the server's master key file when
// --master-key-file is not given.
const EnvMasterKeyFile = "REEVE_MASTER_KEY_FILE"

// ServerMasterKeyRequest asks for a master key rotation.
type ServerMasterKeyRequest struct {
	DataDir, DatabaseURL, MasterKeyFile string
	DropOld                             bool
}

// ServerMasterKeyRotation is what a rotation did.
type ServerMasterKeyRotation struct {
	File      string `json:"file"`
	OldKeyID  string `json:"old_key_id"`
	NewKeyID  string `json:"new_key_id"`
	Rewrapped int    `json:"rewrapped"`
	Dropped   int    `json:"dropped"`
}

// masterKeyFile is --master-key-file, else REEVE_MASTER_KEY_FILE, else ""
// (the data directory's master.key).
func masterKeyFile(env *Env, flag string) string {
	if flag != "" {
		return flag
	}
	if env.Getenv != nil {
		return env.Getenv(EnvMasterKeyFile)
	}
	return ""
}

type serverMasterKeyOptions struct {
	serverDBOptions
	keyFile string
	dropOld bool
}

func newServerMasterKeyCmd(e *Env) *cobra.Command {
	o := &serverMasterKeyOptions{serverDBOptions: serverDBOptions{env: e}}
	rotate := &cobra.Command{
		Use:   "rotate [--drop-old]",
		Short: "Put a fresh master key first in the key file and re-wrap every stored data key under it, in one transaction",
		Long: "Generates a new master key at the head of the key file (0600), keeping the old one after it, then re-wraps the data key of\n" +
			"every sealed value the server keeps (signing keys, provider keys) under the new key in ONE database transaction: if any\n" +
			"value fails to open, nothing changes. The values themselves are not re-encrypted.\n" +
			"Restart every server afterwards (they load the key file at start). Once all run with the new file, drop the old key:\n" +
			"  reeve server master-key rotate            # new key first, old kept\n" +
			"  (restart the servers)\n" +
			"  reeve server master-key rotate --drop-old # or rotate once with --drop-old when one server uses the data\n" +
			"A key given in REEVE_MASTER_KEY is not rotated here (exit 2).",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServerMasterKeyRotate(cmd.Context(), o) },
	}
	serverDBFlags(rotate, e, &o.serverDBOptions)
	rotate.Flags().StringVar(&o.keyFile, "master-key-file", "", "master key file (default $"+EnvMasterKeyFile+", else master.key in the data directory)")
	rotate.Flags().BoolVar(&o.dropOld, "drop-old", false, "after re-wrapping, keep only the new key in the file")
	rotate.Flags().BoolVar(&o.json, "json", false, "print the result as JSON")
	return newGroupCmd("master-key", "Manage the master key that seals the server's secrets", rotate)
}

func runServerMasterKeyRotate(ctx context.Context, o *serverMasterKeyOptions) error {
	if o.env.Programs.Server.RotateMasterKey == nil {
		return exitf(ExitFailure, "this build of reeve has no control plane")
	}
	if o.env.Getenv != nil && o.env.Getenv("REEVE_MASTER_KEY") != "" {
		return exitf(ExitUsage, "the master key comes from REEVE_MASTER_KEY: rotate it there (new key first, comma separated), or move it to a key file")
	}
	r, err := o.env.Programs.Server.RotateMasterKey(ctx, ServerMasterKeyRequest{
		DataDir: o.dataDir, DatabaseURL: o.databaseURL, MasterKeyFile: masterKeyFile(o.env, o.keyFile), DropOld: o.dropOld,
	})
	if err != nil {
		return dbError(err)
	}
	if o.json {
		return writeJSON(o.env.Out, r)
	}
	_, err = fmt.Fprintf(o.env.Out, "master key %s -> %s in %s: %d sealed values re-wrapped", r.OldKeyID, r.NewKeyID, r.File, r.Rewrapped)
	if err == nil && o.dropOld {
		_, err = fmt.Fprintf(o.env.Out, ", %d old key(s) dropped", r.Dropped)
	}
	if err == nil && !o.dropOld {
		_, err = fmt.Fprint(o.env.Out, "; restart the servers, then drop the old key with --drop-old")
	}
	if err == nil {
		_, err = fmt.Fprintln(o.env.Out)
	}
	return err
}
