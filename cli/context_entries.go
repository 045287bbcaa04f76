package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/contextvault"
	"reeve.dev/reeve/server/sdk"
)

// contextCommands are the 25 commands of spec 4.13's context family.
func contextCommands(env *Env) []*cobra.Command {
	return []*cobra.Command{
		newContextInitCmd(env), newContextStatusCmd(env), newContextAddCmd(env), newContextProposeCmd(env),
		newContextUseGitHubCmd(env), newContextResolveCmd(env), newContextSyncCmd(env, "push"), newContextSyncCmd(env, "pull"),
		newContextSyncCmd(env, "all"), newContextEpochPublishCmd(env), newContextEpochRotateCmd(env),
		newContextRecoveryBackupCmd(env), newContextRecoveryRestoreCmd(env), newContextRotationsCmd(env),
		newContextGrantsCmd(env), newContextRevokesCmd(env), newContextDecisionsCmd(env), newContextPreviewCmd(env),
		newContextEnrollRequestCmd(env), newContextEnrollApproveCmd(env), newContextEnrollAcceptCmd(env),
		newContextEnrollmentsCmd(env), newContextTeamGrantCmd(env), newContextTeamAcceptCmd(env), newContextResetCmd(env),
	}
}

func newContextInitCmd(env *Env) *cobra.Command {
	var name, vault string
	return contextCommand(env, "init", "Create this device's key (in --key-store) and enroll it; --vault NAME also creates a vault", cobra.NoArgs, true,
		func(o *contextOptions, cmd *cobra.Command) {
			cmd.Flags().StringVar(&name, "name", "", "the device's name (default the host name)")
			cmd.Flags().StringVar(&vault, "vault", "", "create a vault with this name and publish its first epoch")
		},
		func(ctx context.Context, o *contextOptions, _ []string) error {
			if name == "" {
				name, _ = os.Hostname()
			}
			return o.with(true, func(v *contextvault.Vault) error {
				res, err := v.Init(ctx, name, vault)
				if err != nil {
					return err
				}
				return o.print(res, func(w io.Writer) {
					fmt.Fprintf(w, "device %s (%s) is %s\n", res.Device.ID, res.Device.Name, res.Device.State)
					fmt.Fprintf(w, "fingerprint %s\n", res.Fingerprint)
					fmt.Fprintf(w, "private key in %s\n", res.KeyWhere)
					if res.Device.State == sdk.DevicePending {
						// The other device's home is not known here: its command stays bare.
						fmt.Fprintf(w, "on another device of yours, compare this fingerprint and run:\n  reeve context device-enroll-approve %s --fingerprint %s\nthen here: %s\n", res.Device.ID, res.Fingerprint, o.reeve("context device-enroll-accept"))
					}
					if res.Vault != nil {
						fmt.Fprintf(w, "vault %s (%s) at epoch %d\n", res.Vault.Name, res.Vault.ID, res.Vault.Epoch)
					}
				})
			})
		})
}

func newContextStatusCmd(env *Env) *cobra.Command {
	var offline bool
	return contextCommand(env, "status", "This device and its vaults: entries, conflicts, unpushed events, keys, rotations due", cobra.NoArgs, true,
		func(o *contextOptions, cmd *cobra.Command) {
			cmd.Flags().BoolVar(&offline, "offline", false, "do not ask the control plane")
		},
		func(ctx context.Context, o *contextOptions, _ []string) error {
			online := !offline
			if online {
				if _, err := o.home.ReadRelayCredentials(); err != nil {
					online = false // status works unpaired
				}
			}
			return o.with(online, func(v *contextvault.Vault) error {
				st, err := v.Status(ctx)
				if err != nil {
					return err
				}
				return o.print(st, func(w io.Writer) {
					if st.DeviceID == "" {
						fmt.Fprintf(w, "no device: run `%s`\n", o.reeve("context init"))
					} else {
						state := "unknown (offline)"
						if st.Device != nil {
							state = st.Device.State
						}
						fmt.Fprintf(w, "device %s: %s; fingerprint %s; key in %s\n", st.DeviceID, state, st.Fingerprint, st.KeyWhere)
					}
					if st.Problem != "" {
						fmt.Fprintf(w, "problem: %s\n", st.Problem)
					}
					for _, s := range st.Sources {
						line := fmt.Sprintf("%-20s %-5s epoch %d, %d entries", s.Name, s.Kind, s.Epoch, s.Entries)
						for _, x := range []struct {
							n    int
							what string
						}{{s.Conflicts, "in conflict"}, {s.Unpushed, "unpushed"}, {s.Unreadable.NoKey, "without a key"}, {s.Unreadable.Tampered, "tampered"}, {s.PendingProposals, "proposals waiting"}} {
							if x.n > 0 {
								line += fmt.Sprintf(", %d %s", x.n, x.what)
							}
						}
						if s.RotationDue {
							line += ", rotation due (rotations-process)"
						}
						if s.Gone {
							line += ", removed from it"
						}
						fmt.Fprintln(w, line)
					}
				})
			})
		})
}

func newContextAddCmd(env *Env) *cobra.Command {
	var e contextvault.NewEntry
	var vault string
	var noPush bool
	return contextCommand(env, "add [FILE|-]", "Add an entry (markdown from FILE, or stdin): sealed here, then pushed", cobra.MaximumNArgs(1), true,
		func(o *contextOptions, cmd *cobra.Command) {
			f := cmd.Flags()
			f.StringVar(&e.Title, "title", "", "the entry's title (sealed)")
			f.StringSliceVar(&e.Tags, "tag", nil, "a tag (sealed); repeat or separate with commas")
			f.StringVar(&e.UseWhen, "use-when", "", "when the entry matters: always, path:GLOB, or words; ';' separates (server-visible)")
			f.StringVar(&e.UpdateWhen, "update-when", "", "when it needs revising (server-visible)")
			f.StringVar(&vault, "vault", "", "the vault (default: the only one)")
			f.StringVar(&e.EntryID, "entry", "", "replace this entry instead of adding one")
			f.BoolVar(&noPush, "no-push", false, "keep it on this device until sync-push")
			cmd.MarkFlagRequired("title")
		},
		func(ctx context.Context, o *contextOptions, args []string) error {
			body, err := readBody(o.env, argOr(args, ""))
			if err != nil {
				return err
			}
			e.Body = body
			return o.with(!noPush, func(v *contextvault.Vault) error {
				ref, err := o.onlyVault(v, vault)
				if err != nil {
					return err
				}
				added, err := v.Add(ctx, ref, e)
				if err != nil {
					return err
				}
				if !noPush {
					if _, err := v.SyncPush(ctx, ref); err != nil {
						fmt.Fprintf(o.env.Err, "reeve: kept on this device, not pushed (%v); run `%s`\n", err, o.reeve("context sync-push"))
					} else {
						added.Pushed = true
					}
				}
				return o.print(added, func(w io.Writer) {
					state := "pushed"
					if !added.Pushed {
						state = "on this device only"
					}
					fmt.Fprintf(w, "entry %s in %s (epoch %d), %s\n", added.EntryID, added.Vault, added.Epoch, state)
				})
			})
		})
}

// onlyVault is the vault a command acts on: the one named, or the only
// vault of the device.
func (h homeFlag) onlyVault(v *contextvault.Vault, ref string) (string, error) {
	if ref != "" {
		return ref, nil
	}
	st, err := v.Status(context.Background())
	if err != nil {
		return "", err
	}
	var names []string
	for _, s := range st.Sources {
		if s.Kind == sdk.ContextKindVault && !s.Gone {
			names = append(names, s.Name)
		}
	}
	if len(names) == 1 {
		return names[0], nil
	}
	if len(names) == 0 {
		return "", exitf(ExitNotFound, "this device has no vault: create one with `%s`, or accept a shared one with `%s`", h.reeve("context init --vault NAME"), h.reeve("context team-grants-accept"))
	}
	return "", exitf(ExitUsage, "this device has %d vaults (%s): name one with --vault", len(names), strings.Join(names, ", "))
}

func newContextResolveCmd(env *Env) *cobra.Command {
	var o2 contextvault.ResolveOptions
	var markdown bool
	return contextCommand(env, "resolve [DIR]", "The entries relevant to a task in a directory, decrypted on this device", cobra.MaximumNArgs(1), true,
		func(o *contextOptions, cmd *cobra.Command) {
			f := cmd.Flags()
			f.StringVar(&o2.Task, "task", "", "what the work is about (a prompt)")
			f.IntVar(&o2.Limit, "limit", 20, "at most this many entries")
			f.IntVar(&o2.MaxBytes, "max-bytes", 16<<10, "at most this many bytes of entry bodies")
			f.BoolVar(&markdown, "markdown", false, "print the entries as an agent receives them")
		},
		func(ctx context.Context, o *contextOptions, args []string) error {
			o2.Dir = "."
			if len(args) == 1 {
				o2.Dir = args[0]
			}
			dir := absPath(o2.Dir)
			if st, err := os.Stat(dir); err != nil || !st.IsDir() {
				return exitf(ExitNotFound, "%s is not a directory", o2.Dir)
			}
			o2.Dir = dir
			return o.with(false, func(v *contextvault.Vault) error {
				res, err := v.Resolve(ctx, o2)
				if err != nil {
					return err
				}
				if markdown && !o.json {
					fmt.Fprint(o.env.Out, res.Markdown())
					return nil
				}
				return o.print(res, func(w io.Writer) {
					for _, e := range res.Entries {
						flag := ""
						if e.Conflict {
							flag = " (conflicting versions)"
						}
						fmt.Fprintf(w, "%6.1f  %-16s %s%s\n", e.Score, e.Vault, e.Title, flag)
					}
					if len(res.Entries) == 0 {
						fmt.Fprintf(w, "nothing relevant among %d entries\n", res.Considered)
					}
					if n := res.Unreadable.NoKey + res.Unreadable.Tampered; n > 0 {
						fmt.Fprintf(o.env.Err, "reeve: %d entries could not be opened on this device (%d without a key, %d tampered)\n", n, res.Unreadable.NoKey, res.Unreadable.Tampered)
					}
				})
			})
		})
}

func newContextSyncCmd(env *Env, what string) *cobra.Command {
	var vault string
	short := map[string]string{
		"push": "Send this device's new entries (resumable; a rotated vault's are sealed again first)",
		"pull": "Fetch what others wrote since the last pull; replayed, reordered or tampered events are refused",
		"all":  "Enforce revocations and rotations, push, fetch git sources, pull, and wrap keys owed to others",
	}[what]
	return contextCommand(env, "sync-"+what, short, cobra.NoArgs, true,
		func(o *contextOptions, cmd *cobra.Command) {
			if what != "all" {
				cmd.Flags().StringVar(&vault, "vault", "", "one vault (default all)")
			}
		},
		func(ctx context.Context, o *contextOptions, _ []string) error {
			return o.with(true, func(v *contextvault.Vault) error {
				switch what {
				case "push":
					res, err := v.SyncPush(ctx, vault)
					if err != nil {
						return err
					}
					return o.print(res, func(w io.Writer) {
						for _, r := range res {
							fmt.Fprintf(w, "%s: pushed %d (%d already there), head %d\n", r.Vault, r.Pushed, r.Duplicates, r.HeadSeq)
						}
					})
				case "pull":
					res, err := v.SyncPull(ctx, vault)
					if perr := o.print(res, func(w io.Writer) { printPulls(w, res) }); perr != nil {
						return perr
					}
					return err
				}
				res, err := v.SyncAll(ctx)
				if perr := o.print(res, func(w io.Writer) {
					for _, r := range res.Revokes.Rotated {
						fmt.Fprintf(w, "%s: rotated to epoch %d after a revocation\n", r.Vault, r.Epoch)
					}
					for _, r := range res.Rotations {
						fmt.Fprintf(w, "%s: rotated to epoch %d (requested)\n", r.Vault, r.Epoch)
					}
					for _, r := range res.Pushed {
						fmt.Fprintf(w, "%s: pushed %d\n", r.Vault, r.Pushed)
					}
					for _, g := range res.Git {
						fmt.Fprintf(w, "%s: git %.12s, %d documents (%d changed, %d removed)\n", g.Source, g.Commit, g.Docs, g.Changed, g.Removed)
					}
					printPulls(w, res.Pulled)
					if n := len(res.Grants.Granted); n > 0 {
						fmt.Fprintf(w, "wrapped %d key(s) for other devices\n", n)
					}
				}); perr != nil {
					return perr
				}
				return err
			})
		})
}

func printPulls(w io.Writer, res []contextvault.PullResult) {
	for _, r := range res {
		fmt.Fprintf(w, "%s: pulled %d, at %d\n", r.Vault, r.Pulled, r.Cursor)
		for _, ref := range r.Refused {
			fmt.Fprintf(w, "  refused: %s\n", ref)
		}
	}
}

func newContextDecisionsCmd(env *Env) *cobra.Command {
	var state, accept, reject, reason, entry, provider string
	return contextCommand(env, "decisions", "Proposals from sessions' context corrections: list them, or --accept / --reject one", cobra.NoArgs, true,
		func(o *contextOptions, cmd *cobra.Command) {
			f := cmd.Flags()
			f.StringVar(&state, "state", "", "list proposals in this state: pending, previewed, accepted, rejected (default undecided)")
			f.StringVar(&accept, "accept", "", "preview this proposal and write it into its vault (or propose it to its git source)")
			f.StringVar(&entry, "entry", "", "with --accept: replace this entry instead of adding one")
			f.StringVar(&provider, "provider", "", "with --accept on a git source: the code host (github opens a pull request with gh)")
			f.StringVar(&reject, "reject", "", "reject this proposal")
			f.StringVar(&reason, "reason", "", "why (with --reject)")
		},
		func(ctx context.Context, o *contextOptions, _ []string) error {
			if accept != "" && reject != "" {
				return exitf(ExitUsage, "--accept and --reject contradict each other")
			}
			return o.with(true, func(v *contextvault.Vault) error {
				switch {
				case accept != "":
					d, err := v.Accept(ctx, accept, entry, provider)
					if err != nil {
						return err
					}
					return o.print(d, func(w io.Writer) {
						printPreview(w, *d.Preview)
						if d.Added != nil {
							fmt.Fprintf(w, "accepted: entry %s in %s\n", d.Added.EntryID, d.Added.Vault)
						}
						if d.Proposed != nil {
							printProposed(w, *d.Proposed)
						}
					})
				case reject != "":
					d, err := v.Reject(ctx, reject, reason)
					if err != nil {
						return err
					}
					return o.print(d, func(w io.Writer) { fmt.Fprintf(w, "rejected %s\n", d.Proposal.ID) })
				}
				ps, err := v.Decisions(ctx, state)
				if err != nil {
					return err
				}
				return o.print(ps, func(w io.Writer) {
					if len(ps) == 0 {
						fmt.Fprintln(w, "no proposals")
					}
					for _, p := range ps {
						title := "(" + p.Problem + ")"
						if p.Readable {
							title = p.Content.Title
						}
						fmt.Fprintf(w, "%s  %-9s %-14s %-12s %s\n", p.ID, p.State, p.CorrectionKind, p.Vault, title)
					}
				})
			})
		})
}

func printPreview(w io.Writer, p contextvault.Preview) {
	fmt.Fprintf(w, "%s: %s would be %s", p.Vault, p.Title, map[string]string{"new": "a new entry", "change": "a change of an existing entry", "duplicate": "a duplicate of an existing entry"}[p.Kind])
	if p.Closest != nil {
		fmt.Fprintf(w, " (%s)", p.Closest.Title)
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, p.Diff)
	if p.Proof != nil {
		fmt.Fprintf(w, "preview proof %s (vault at %d)\n", p.Proof.ID, p.Proof.BaseSeq)
	}
}

func printProposed(w io.Writer, p contextvault.Proposed) {
	fmt.Fprintf(w, "pushed %s to %s (%s, commit %.12s)\n", p.Branch, p.Source, p.File, p.Commit)
	switch {
	case p.Opened:
		fmt.Fprintf(w, "pull request: %s\n", p.URL)
	case p.URL != "":
		fmt.Fprintf(w, "open the pull request: %s\n", p.URL)
	default:
		fmt.Fprintln(w, p.Command)
	}
}

func newContextPreviewCmd(env *Env) *cobra.Command {
	var file, vault, title string
	return contextCommand(env, "candidate-preview [PROPOSAL]", "What a proposed entry would add to its vault (new, change with a diff, duplicate), recorded with a preview proof", cobra.MaximumNArgs(1), true,
		func(o *contextOptions, cmd *cobra.Command) {
			f := cmd.Flags()
			f.StringVar(&file, "file", "", "preview a local candidate from this file (- for stdin) instead of a proposal")
			f.StringVar(&title, "title", "", "the local candidate's title")
			f.StringVar(&vault, "vault", "", "the local candidate's vault (default: the only one)")
		},
		func(ctx context.Context, o *contextOptions, args []string) error {
			id := ""
			if len(args) == 1 {
				id = args[0]
			}
			if (id == "") == (file == "") {
				return exitf(ExitUsage, "name a PROPOSAL, or give --file with --title")
			}
			return o.with(true, func(v *contextvault.Vault) error {
				var local *contextvault.Candidate
				ref := vault
				if file != "" {
					if title == "" {
						return exitf(ExitUsage, "--title is required with --file")
					}
					body, err := readBody(o.env, file)
					if err != nil {
						return err
					}
					if ref, err = o.onlyVault(v, vault); err != nil {
						return err
					}
					local = &contextvault.Candidate{NewEntry: contextvault.NewEntry{Title: title, Body: body}}
				}
				pv, err := v.CandidatePreview(ctx, id, local, ref)
				if err != nil {
					return err
				}
				return o.print(pv, func(w io.Writer) { printPreview(w, pv) })
			})
		})
}

func newContextProposeCmd(env *Env) *cobra.Command {
	var po contextvault.ProposeOptions
	return contextCommand(env, "propose [FILE|-]", "Propose an entry to a git source: push a branch and open a pull request (with gh when installed)", cobra.MaximumNArgs(1), true,
		func(o *contextOptions, cmd *cobra.Command) {
			f := cmd.Flags()
			f.StringVar(&po.Provider, "provider", "", "the code host: github opens the pull request with gh when it is installed")
			f.StringVar(&po.Source, "source", "", "the git source (default: the only one)")
			f.StringVar(&po.Entry.Title, "title", "", "the document's title")
			f.StringSliceVar(&po.Entry.Tags, "tag", nil, "a tag; repeat or separate with commas")
			f.StringVar(&po.Entry.UseWhen, "use-when", "", "when it matters (front matter)")
			f.StringVar(&po.Entry.UpdateWhen, "update-when", "", "when it needs revising (front matter)")
			f.StringVar(&po.File, "path", "", "the document's path in the repository (default: from the title)")
			cmd.MarkFlagRequired("provider")
			cmd.MarkFlagRequired("title")
		},
		func(ctx context.Context, o *contextOptions, args []string) error {
			body, err := readBody(o.env, argOr(args, ""))
			if err != nil {
				return err
			}
			po.Entry.Body = body
			return o.with(true, func(v *contextvault.Vault) error {
				p, err := v.Propose(ctx, po)
				if err != nil {
					return err
				}
				return o.print(p, func(w io.Writer) { printProposed(w, p) })
			})
		})
}

func newContextUseGitHubCmd(env *Env) *cobra.Command {
	var g contextvault.UseGitOptions
	return contextCommand(env, "use-github", "Attach a repository of markdown (OWNER/REPO, a URL, or a local repository) as a context source", cobra.NoArgs, true,
		func(o *contextOptions, cmd *cobra.Command) {
			f := cmd.Flags()
			f.StringVar(&g.Repo, "repo", "", "OWNER/REPO, a clone URL, or a local repository")
			f.StringVar(&g.Provider, "provider", "", "the code host (github, gitlab, or any name for other hosts)")
			f.StringVar(&g.Name, "name", "", "the source's name (default the repository's)")
			f.StringVar(&g.Branch, "branch", "", "the branch to follow (default the repository's)")
			f.StringVar(&g.UseWhen, "use-when", "", "when the whole source matters (server-visible)")
			f.StringVar(&g.UpdateWhen, "update-when", "", "when it needs revising (server-visible)")
			cmd.MarkFlagRequired("repo")
			cmd.MarkFlagRequired("provider")
		},
		func(ctx context.Context, o *contextOptions, _ []string) error {
			return o.with(true, func(v *contextvault.Vault) error {
				src, r, err := v.UseGit(ctx, g)
				if err != nil {
					return err
				}
				return o.print(map[string]any{"source": src, "sync": r}, func(w io.Writer) {
					fmt.Fprintf(w, "attached %s (%s): %d documents at %.12s\n", src.Name, src.ID, r.Docs, r.Commit)
				})
			})
		})
}
