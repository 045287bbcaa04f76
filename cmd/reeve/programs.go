package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"reeve.dev/reeve/cli"
	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/runtime"
	"reeve.dev/reeve/server/host"
	"reeve.dev/reeve/server/relay"
	"reeve.dev/reeve/server/store"
	"reeve.dev/reeve/server/webhooks"
)

// programs wires the daemon worker and the control plane into the command
// line, which stays free of their internals.
func programs() cli.Programs {
	return cli.Programs{
		Worker: func(ctx context.Context, o cli.WorkerOptions) error {
			return runtime.Run(ctx, runtime.Options{
				Home: home.Dir(o.Home), SupervisorPID: o.SupervisorPID,
				Stdin: o.Stdin, Status: o.Status, Log: o.Log,
			})
		},
		WorkerFatal: runtime.IsFatal,
		Server:      ServerPrograms(),
		Relay:       RelayPrograms(),
	}
}

// RelayPrograms adapts server/relay to the command line's entry points.
func RelayPrograms() cli.RelayPrograms {
	return cli.RelayPrograms{
		Run: func(ctx context.Context, o cli.RelayRun) error {
			return relay.Serve(ctx, relay.ServeOptions{
				Listen: o.Listen, ServerURL: o.ServerURL, Credential: o.Credential,
				Logger: o.Logger, Ready: o.Ready,
			})
		},
	}
}

// ServerPrograms adapts server/host to the command line's entry points.
func ServerPrograms() cli.ServerPrograms {
	return cli.ServerPrograms{
		Run: func(ctx context.Context, o cli.ServerRun) error {
			h, err := host.New(ctx, host.Options{
				Listen: o.Listen, DataDir: o.DataDir, DatabaseURL: o.DatabaseURL,
				PublicURL: o.PublicURL, AppURL: o.AppURL, RelayURL: o.RelayURL,
				OwnerEmail: o.OwnerEmail, MasterKeyFile: o.MasterKeyFile, Out: o.Out, Logger: o.Logger,
				Webhooks:    webhooks.Options{Targets: webhooks.TargetPolicy{AllowPrivate: o.AllowPrivateWebhookTargets}},
				WebhookRate: o.WebhookRate, RelayTokenTTL: o.RelayTokenTTL,
			})
			if err != nil {
				return err
			}
			defer h.Close()
			if o.Ready != nil {
				o.Ready(h.Addr(), h.URL())
			}
			return h.Run(ctx)
		},
		CreateToken: func(ctx context.Context, o cli.ServerTokenRequest) (cli.ServerTokenResult, error) {
			r, err := host.CreateToken(ctx, host.TokenOptions{DataDir: o.DataDir, DatabaseURL: o.DatabaseURL, Email: o.Email, Name: o.Name})
			return cli.ServerTokenResult{Token: r.Token, TokenID: r.TokenID, UserID: r.UserID, CreatedWorkspace: r.CreatedWorkspace}, err
		},
		RelayCredential: func(ctx context.Context, o cli.ServerTokenRequest) (string, error) {
			return host.StoreRelayCredential(ctx, host.Options{DataDir: o.DataDir, DatabaseURL: o.DatabaseURL})
		},
		Invite: func(ctx context.Context, o cli.ServerInviteRequest) (cli.ServerInviteResult, error) {
			r, err := host.Invite(ctx, host.InviteOptions{DataDir: o.DataDir, DatabaseURL: o.DatabaseURL, Workspace: o.Workspace, Email: o.Email, Role: o.Role, TTL: o.TTL, AppURL: o.AppURL})
			if err != nil {
				if errors.Is(err, store.ErrNotFound) {
					err = fmt.Errorf("%w: %w", cli.ErrServerNotFound, err)
				}
				return cli.ServerInviteResult{}, err
			}
			return cli.ServerInviteResult{ID: r.Invitation.ID, Email: r.Invitation.Email, Role: r.Invitation.Role, ExpiresAt: r.Invitation.ExpiresAt, Token: r.Token, Link: r.Link}, nil
		},
		LoginLink: func(ctx context.Context, o cli.ServerLoginLinkRequest) (cli.ServerLoginLinkResult, error) {
			link, exp, err := host.LoginLink(ctx, host.LoginLinkOptions{DataDir: o.DataDir, DatabaseURL: o.DatabaseURL, Email: o.Email, AppURL: o.AppURL, TTL: o.TTL})
			if errors.Is(err, store.ErrNotFound) {
				err = fmt.Errorf("%w: %w", cli.ErrServerNotFound, err)
			}
			return cli.ServerLoginLinkResult{Link: link, ExpiresAt: exp}, err
		},
		DefaultDataDir: host.DefaultDataDir,
		EvidenceKeys: func(ctx context.Context, o cli.ServerDBRequest, rotate bool) (cli.ServerEvidenceKeys, error) {
			r, err := host.EvidenceKeys(ctx, host.Options{DataDir: o.DataDir, DatabaseURL: o.DatabaseURL}, rotate)
			out := cli.ServerEvidenceKeys{Rotated: r.Rotated, Keys: []cli.ServerEvidenceKey{}}
			for _, k := range r.Keys {
				out.Keys = append(out.Keys, cli.ServerEvidenceKey{Kid: k.Kid, Status: k.Status, Alg: k.Alg, X: k.X})
			}
			return out, err
		},
		SupportOperators: func(ctx context.Context, o cli.ServerDBRequest, action, email string) (cli.ServerSupportOperators, error) {
			r, err := host.SupportOperators(ctx, host.Options{DataDir: o.DataDir, DatabaseURL: o.DatabaseURL}, action, email)
			if errors.Is(err, store.ErrNotFound) {
				err = fmt.Errorf("%w: %w", cli.ErrServerNotFound, err)
			}
			out := cli.ServerSupportOperators{Changed: r.Changed, Operators: []cli.ServerSupportOperator{}}
			for _, op := range r.Operators {
				out.Operators = append(out.Operators, cli.ServerSupportOperator{UserID: op.UserID, Email: op.Email, GrantedBy: op.GrantedBy, GrantedAt: op.GrantedAt})
			}
			return out, err
		},
		Migrate: func(ctx context.Context, o cli.ServerDBRequest) (cli.ServerMigration, error) {
			m, err := host.Migrate(ctx, host.Options{DataDir: o.DataDir, DatabaseURL: o.DatabaseURL})
			return cli.ServerMigration(m), err
		},
		Export: func(ctx context.Context, o cli.ServerDBRequest, w io.Writer) (cli.ServerDumpSummary, error) {
			s, err := host.Export(ctx, host.Options{DataDir: o.DataDir, DatabaseURL: o.DatabaseURL}, w)
			return cli.ServerDumpSummary(s), err
		},
		Import: func(ctx context.Context, o cli.ServerDBRequest, r io.Reader) (cli.ServerDumpSummary, error) {
			s, err := host.Import(ctx, host.Options{DataDir: o.DataDir, DatabaseURL: o.DatabaseURL}, r)
			return cli.ServerDumpSummary(s), err
		},
		RotateMasterKey: func(ctx context.Context, o cli.ServerMasterKeyRequest) (cli.ServerMasterKeyRotation, error) {
			r, err := host.RotateMasterKey(ctx, host.Options{DataDir: o.DataDir, DatabaseURL: o.DatabaseURL, MasterKeyFile: o.MasterKeyFile}, o.DropOld)
			return cli.ServerMasterKeyRotation(r), err
		},
	}
}
