package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/internal/keystore"
)

// --key-store file|keychain: where the home's secrets (the local API token,
// the relay issue token) live. A new home uses the OS keychain when one is
// reachable and 0600 files otherwise; an existing home keeps its choice
// until the flag moves its secrets.

func addKeyStoreFlag(cmd *cobra.Command) {
	cmd.Flags().String("key-store", "", "where the home's secrets live: file (0600 files in the home) or keychain (the OS keychain); default for a new home: keychain when one is reachable, else file")
}

// applyKeyStore moves the home's secrets to the store the flag names, or
// chooses the store of a new home, and says what it did.
func applyKeyStore(cmd *cobra.Command, env *Env, dir home.Dir) error {
	kind, _ := cmd.Flags().GetString("key-store")
	switch kind {
	case "", keystore.KindFile, keystore.KindKeychain:
	default:
		return exitf(ExitUsage, "--key-store must be %s or %s, got %q", keystore.KindFile, keystore.KindKeychain, kind)
	}
	if kind == "" {
		if !dir.Fresh() || dir.KeychainReachable() != nil {
			return nil
		}
		kind = keystore.KindKeychain
	}
	cur, err := dir.KeyStoreKind()
	if err != nil {
		return withExit(ExitFailure, err)
	}
	if err := dir.Prepare(); err != nil {
		return withExit(ExitFailure, err)
	}
	if err := dir.SetKeyStore(kind); err != nil {
		return exitf(ExitFailure, "key store %s: %v", kind, err)
	}
	if cur != kind || kind == keystore.KindKeychain && dir.Fresh() {
		fmt.Fprintf(env.Err, "reeve: the home's secrets are kept in %s\n", describeKeyStore(kind, dir))
	}
	return nil
}

func describeKeyStore(kind string, dir home.Dir) string {
	if kind == keystore.KindKeychain {
		return "the OS keychain (service reeve)"
	}
	return "0600 files in " + string(dir)
}
