package cli

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/contextvault"
	"reeve.dev/reeve/server/sdk"
)

// The context commands about keys: epochs, grants, revocations,
// enrollment, sharing and recovery.

func newContextEpochPublishCmd(env *Env) *cobra.Command {
	var vault string
	return contextCommand(env, "epoch-publish", "Publish a vault's first epoch key, or give its current key to eligible devices that lack it", cobra.NoArgs, true,
		func(o *contextOptions, cmd *cobra.Command) {
			cmd.Flags().StringVar(&vault, "vault", "", "the vault (default: the only one)")
		},
		func(ctx context.Context, o *contextOptions, _ []string) error {
			return o.with(true, func(v *contextvault.Vault) error {
				ref, err := o.onlyVault(v, vault)
				if err != nil {
					return err
				}
				r, err := v.EpochPublish(ctx, ref)
				if err != nil {
					return err
				}
				return o.print(r, func(w io.Writer) { printEpoch(w, r) })
			})
		})
}

func printEpoch(w io.Writer, r contextvault.EpochResult) {
	if r.Reason == "publish" {
		fmt.Fprintf(w, "%s: epoch %d key given to %d device(s)\n", r.Vault, r.Epoch, r.Granted)
		return
	}
	fmt.Fprintf(w, "%s: epoch %d published for %d device(s) (%s)\n", r.Vault, r.Epoch, len(r.Recipients), r.Reason)
}

func newContextEpochRotateCmd(env *Env) *cobra.Command {
	var vault, reason string
	return contextCommand(env, "epoch-rotate", "Rotate a vault to a new epoch key, wrapped to exactly the devices eligible now", cobra.NoArgs, true,
		func(o *contextOptions, cmd *cobra.Command) {
			cmd.Flags().StringVar(&vault, "vault", "", "the vault (default: the only one)")
			cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit log")
		},
		func(ctx context.Context, o *contextOptions, _ []string) error {
			return o.with(true, func(v *contextvault.Vault) error {
				ref, err := o.onlyVault(v, vault)
				if err != nil {
					return err
				}
				r, err := v.EpochRotate(ctx, ref, reason)
				if err != nil {
					return err
				}
				return o.print(r, func(w io.Writer) { printEpoch(w, r) })
			})
		})
}

func newContextRotationsCmd(env *Env) *cobra.Command {
	return contextCommand(env, "rotations-process", "Rotate every vault of this device whose rotation is due (requested, or after a revocation)", cobra.NoArgs, true, nil,
		func(ctx context.Context, o *contextOptions, _ []string) error {
			return o.with(true, func(v *contextvault.Vault) error {
				rs, err := v.RotationsProcess(ctx)
				if err != nil {
					return err
				}
				return o.print(orEmptyList(rs), func(w io.Writer) {
					if len(rs) == 0 {
						fmt.Fprintln(w, "no rotation due")
					}
					for _, r := range rs {
						printEpoch(w, r)
					}
				})
			})
		})
}

func orEmptyList[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func newContextGrantsCmd(env *Env) *cobra.Command {
	return contextCommand(env, "grants-process", "Wrap the keys this device holds for eligible devices that lack them (new members' and approved devices)", cobra.NoArgs, true, nil,
		func(ctx context.Context, o *contextOptions, _ []string) error {
			return o.with(true, func(v *contextvault.Vault) error {
				r, err := v.GrantsProcess(ctx)
				if err != nil {
					return err
				}
				r.Granted = orEmptyList(r.Granted)
				return o.print(r, func(w io.Writer) { fmt.Fprintf(w, "wrapped %d key(s) for other devices\n", len(r.Granted)) })
			})
		})
}

func newContextRevokesCmd(env *Env) *cobra.Command {
	var t contextvault.RevokeTarget
	return contextCommand(env, "revokes-process", "Revoke a device (--device) or remove a member (--vault --member), then rotate every vault a revoked party can still read", cobra.NoArgs, true,
		func(o *contextOptions, cmd *cobra.Command) {
			f := cmd.Flags()
			f.StringVar(&t.DeviceID, "device", "", "revoke this device (yours, or any as a workspace admin)")
			f.StringVar(&t.Vault, "vault", "", "with --member: the vault to remove them from")
			f.StringVar(&t.Member, "member", "", "with --vault: the member (email or user id) to remove")
		},
		func(ctx context.Context, o *contextOptions, _ []string) error {
			if (t.Vault == "") != (t.Member == "") {
				return exitf(ExitUsage, "--vault and --member go together")
			}
			if t.DeviceID != "" && t.Vault != "" {
				return exitf(ExitUsage, "revoke a device or remove a member, one at a time")
			}
			return o.with(true, func(v *contextvault.Vault) error {
				r, err := v.RevokesProcess(ctx, t)
				if err != nil {
					return err
				}
				r.Revoked, r.Rotated = orEmptyList(r.Revoked), orEmptyList(r.Rotated)
				return o.print(r, func(w io.Writer) {
					if len(r.Rotated) == 0 {
						fmt.Fprintln(w, "no vault to rotate: nobody revoked holds a current key")
					}
					for _, e := range r.Rotated {
						fmt.Fprintf(w, "%s: rotated to epoch %d; the revoked get no key to what is written from now on\n", e.Vault, e.Epoch)
					}
				})
			})
		})
}

func newContextEnrollRequestCmd(env *Env) *cobra.Command {
	var name string
	return contextCommand(env, "device-enroll-request", "Ask to enroll this device (init does it too); prints the fingerprint to compare on another device", cobra.NoArgs, true,
		func(o *contextOptions, cmd *cobra.Command) {
			cmd.Flags().StringVar(&name, "name", "", "the device's name (default the host name)")
		},
		func(ctx context.Context, o *contextOptions, _ []string) error {
			if name == "" {
				name, _ = os.Hostname()
			}
			return contextDo(o, true, func(v *contextvault.Vault) (sdk.ContextDevice, error) { return v.EnrollRequest(ctx, name) },
				func(w io.Writer, d sdk.ContextDevice) {
					fmt.Fprintf(w, "device %s is %s; fingerprint %s\n", d.ID, d.State, d.Fingerprint)
					if d.State == sdk.DevicePending {
						fmt.Fprintf(w, "approve it on another device of yours: reeve context device-enroll-approve %s --fingerprint %s\n", d.ID, d.Fingerprint)
					}
				})
		})
}

func newContextEnrollApproveCmd(env *Env) *cobra.Command {
	var fp string
	return contextCommand(env, "device-enroll-approve DEVICE", "Approve a pending device of yours after comparing its fingerprint; it receives your keys", cobra.ExactArgs(1), true,
		func(o *contextOptions, cmd *cobra.Command) {
			cmd.Flags().StringVar(&fp, "fingerprint", "", "the fingerprint the new device printed (required: compare it)")
			cmd.MarkFlagRequired("fingerprint")
		},
		func(ctx context.Context, o *contextOptions, args []string) error {
			return contextDo(o, true, func(v *contextvault.Vault) (contextvault.Approval, error) { return v.EnrollApprove(ctx, args[0], fp) },
				func(w io.Writer, a contextvault.Approval) {
					fmt.Fprintf(w, "approved %s with %d key(s); on it run: reeve context device-enroll-accept\n", a.Device.ID, a.Keys)
				})
		})
}

func newContextEnrollAcceptCmd(env *Env) *cobra.Command {
	return contextCommand(env, "device-enroll-accept", "Take the keys an approving device wrapped for this one and become active", cobra.NoArgs, true, nil,
		func(ctx context.Context, o *contextOptions, _ []string) error {
			return contextDo(o, true, func(v *contextvault.Vault) (contextvault.Accepted, error) { return v.EnrollAccept(ctx) },
				func(w io.Writer, a contextvault.Accepted) {
					fmt.Fprintf(w, "device %s is %s with %d new key(s) for %d source(s)\n", a.Device.ID, a.Device.State, a.Refresh.NewKeys, a.Refresh.Sources)
				})
		})
}

func newContextEnrollmentsCmd(env *Env) *cobra.Command {
	var pending bool
	return contextCommand(env, "device-enrollments", "The workspace's devices: state and fingerprint", cobra.NoArgs, true,
		func(o *contextOptions, cmd *cobra.Command) {
			cmd.Flags().BoolVar(&pending, "pending", false, "only devices waiting for approval")
		},
		func(ctx context.Context, o *contextOptions, _ []string) error {
			return o.with(true, func(v *contextvault.Vault) error {
				ds, err := v.Enrollments(ctx)
				if err != nil {
					return err
				}
				out := []sdk.ContextDevice{}
				for _, d := range ds {
					if !pending || d.State == sdk.DevicePending {
						out = append(out, d)
					}
				}
				return o.print(out, func(w io.Writer) {
					for _, d := range out {
						me := ""
						if d.ID == v.DeviceID() {
							me = " (this device)"
						}
						fmt.Fprintf(w, "%s  %-8s user %-4d %s  %s%s\n", d.ID, d.State, d.UserID, d.Fingerprint, d.Name, me)
					}
				})
			})
		})
}

func newContextTeamGrantCmd(env *Env) *cobra.Command {
	var vault, member, role string
	return contextCommand(env, "team-grant-create", "Share a vault with another member of the workspace: your keys are wrapped to their devices", cobra.NoArgs, true,
		func(o *contextOptions, cmd *cobra.Command) {
			cmd.Flags().StringVar(&vault, "vault", "", "the vault (default: the only one)")
			cmd.Flags().StringVar(&member, "member", "", "the member: email or user id")
			cmd.Flags().StringVar(&role, "role", "member", "their role in the vault: member or owner")
			cmd.MarkFlagRequired("member")
		},
		func(ctx context.Context, o *contextOptions, _ []string) error {
			if role != "member" && role != "owner" {
				return exitf(ExitUsage, "--role must be member or owner, got %q", role)
			}
			return o.with(true, func(v *contextvault.Vault) error {
				ref, err := o.onlyVault(v, vault)
				if err != nil {
					return err
				}
				g, err := v.TeamGrantCreate(ctx, ref, member, role)
				if err != nil {
					return err
				}
				g.Devices = orEmptyList(g.Devices)
				return o.print(g, func(w io.Writer) {
					fmt.Fprintf(w, "shared %s with user %d: %d key(s) wrapped for %d device(s)\n", g.Vault, g.UserID, g.Keys, len(g.Devices))
					for _, d := range g.Devices {
						fmt.Fprintf(w, "  %s %s %s (compare with what `reeve context status` shows on their machine)\n", d.ID, d.Fingerprint, d.Name)
					}
					if len(g.Devices) == 0 {
						fmt.Fprintln(w, "they have no device yet: once they run `reeve context init`, any member's grants-process wraps the keys for them")
					}
				})
			})
		})
}

func newContextTeamAcceptCmd(env *Env) *cobra.Command {
	return contextCommand(env, "team-grants-accept", "Take the vaults shared with you and the keys wrapped for this device", cobra.NoArgs, true, nil,
		func(ctx context.Context, o *contextOptions, _ []string) error {
			return contextDo(o, true, func(v *contextvault.Vault) (contextvault.RefreshResult, error) { return v.TeamGrantsAccept(ctx) },
				func(w io.Writer, r contextvault.RefreshResult) {
					fmt.Fprintf(w, "%d source(s), %d new key(s)\n", r.Sources, r.NewKeys)
					for _, n := range r.NewNames {
						fmt.Fprintf(w, "  new: %s (run `%s` to fetch its entries)\n", n, o.reeve("context sync-pull"))
					}
					for _, ref := range r.Refused {
						fmt.Fprintf(w, "  refused: %s\n", ref)
					}
				})
		})
}

func newContextRecoveryBackupCmd(env *Env) *cobra.Command {
	var key string
	return contextCommand(env, "recovery-backup", "Upload this device's key sealed with a recovery key (the server cannot open it)", cobra.NoArgs, true,
		func(o *contextOptions, cmd *cobra.Command) {
			cmd.Flags().StringVar(&key, "recovery-key", "", "the recovery key (- reads it from stdin); keep it somewhere safe, apart from this machine")
			cmd.MarkFlagRequired("recovery-key")
		},
		func(ctx context.Context, o *contextOptions, _ []string) error {
			k, err := secretArg(o.env, key, "--recovery-key")
			if err != nil {
				return err
			}
			return contextDo(o, true, func(v *contextvault.Vault) (contextvault.Backup, error) { return v.RecoveryBackup(ctx, k) },
				func(w io.Writer, b contextvault.Backup) {
					fmt.Fprintf(w, "backup %d of device %s stored; restore with `%s`\n", b.Generation, b.DeviceID, o.reeve("context recovery-restore --recovery-key ..."))
				})
		})
}

func newContextRecoveryRestoreCmd(env *Env) *cobra.Command {
	var key, newKey string
	return contextCommand(env, "recovery-restore", "Restore your device key from its backup on this machine, take its keys and entries, and store a fresh backup", cobra.NoArgs, true,
		func(o *contextOptions, cmd *cobra.Command) {
			cmd.Flags().StringVar(&key, "recovery-key", "", "the recovery key (- reads it from stdin)")
			cmd.Flags().StringVar(&newKey, "new-recovery-key", "", "seal the fresh backup with this key instead")
			cmd.MarkFlagRequired("recovery-key")
		},
		func(ctx context.Context, o *contextOptions, _ []string) error {
			k, err := secretArg(o.env, key, "--recovery-key")
			if err != nil {
				return err
			}
			return contextDo(o, true, func(v *contextvault.Vault) (contextvault.Restored, error) { return v.RecoveryRestore(ctx, k, newKey) },
				func(w io.Writer, r contextvault.Restored) {
					fmt.Fprintf(w, "restored device %s on this machine: %d source(s), %d key(s); fresh backup %d stored\n", r.Device.ID, r.Refresh.Sources, r.Refresh.NewKeys, r.NewBackup.Generation)
				})
		})
}

func newContextResetCmd(env *Env) *cobra.Command {
	var sure bool
	return contextCommand(env, "dev-reset-crypto", "Forget this device: revoke it, delete its key and local vault copy (needs --i-understand)", cobra.NoArgs, true,
		func(o *contextOptions, cmd *cobra.Command) {
			cmd.Flags().BoolVar(&sure, "i-understand", false, "confirm: entries only this device holds are lost")
		},
		func(ctx context.Context, o *contextOptions, _ []string) error {
			online := true
			if _, err := o.home.ReadRelayCredentials(); err != nil {
				online = false
			}
			return o.with(online, func(v *contextvault.Vault) error {
				done, err := v.DevReset(ctx, sure)
				if err != nil {
					return err
				}
				return o.print(map[string]any{"done": done}, func(w io.Writer) {
					for _, d := range done {
						fmt.Fprintln(w, d)
					}
				})
			})
		})
}
