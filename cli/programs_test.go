package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"reeve.dev/reeve/server/host"
	"reeve.dev/reeve/server/store"
)

// testPrograms wires the real control plane for the command tests, as main
// does for the binary.
func testPrograms() Programs {
	return Programs{Server: ServerPrograms{
		Run: func(ctx context.Context, o ServerRun) error {
			h, err := host.New(ctx, host.Options{
				Listen: o.Listen, DataDir: o.DataDir, DatabaseURL: o.DatabaseURL,
				PublicURL: o.PublicURL, AppURL: o.AppURL, RelayURL: o.RelayURL,
				OwnerEmail: o.OwnerEmail, MasterKeyFile: o.MasterKeyFile, Out: o.Out, Logger: o.Logger,
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
		RotateMasterKey: func(ctx context.Context, o ServerMasterKeyRequest) (ServerMasterKeyRotation, error) {
			r, err := host.RotateMasterKey(ctx, host.Options{DataDir: o.DataDir, DatabaseURL: o.DatabaseURL, MasterKeyFile: o.MasterKeyFile}, o.DropOld)
			return ServerMasterKeyRotation(r), err
		},
		CreateToken: func(ctx context.Context, o ServerTokenRequest) (ServerTokenResult, error) {
			r, err := host.CreateToken(ctx, host.TokenOptions{DataDir: o.DataDir, DatabaseURL: o.DatabaseURL, Email: o.Email, Name: o.Name})
			return ServerTokenResult{Token: r.Token, TokenID: r.TokenID, UserID: r.UserID, CreatedWorkspace: r.CreatedWorkspace}, err
		},
		Invite: func(ctx context.Context, o ServerInviteRequest) (ServerInviteResult, error) {
			r, err := host.Invite(ctx, host.InviteOptions{DataDir: o.DataDir, DatabaseURL: o.DatabaseURL, Workspace: o.Workspace, Email: o.Email, Role: o.Role, TTL: o.TTL, AppURL: o.AppURL})
			if errors.Is(err, store.ErrNotFound) {
				err = fmt.Errorf("%w: %w", ErrServerNotFound, err)
			}
			return ServerInviteResult{ID: r.Invitation.ID, Email: r.Invitation.Email, Role: r.Invitation.Role, ExpiresAt: r.Invitation.ExpiresAt, Token: r.Token, Link: r.Link}, err
		},
		LoginLink: func(ctx context.Context, o ServerLoginLinkRequest) (ServerLoginLinkResult, error) {
			link, exp, err := host.LoginLink(ctx, host.LoginLinkOptions{DataDir: o.DataDir, DatabaseURL: o.DatabaseURL, Email: o.Email, AppURL: o.AppURL, TTL: o.TTL})
			if errors.Is(err, store.ErrNotFound) {
				err = fmt.Errorf("%w: %w", ErrServerNotFound, err)
			}
			return ServerLoginLinkResult{Link: link, ExpiresAt: exp}, err
		},
		DefaultDataDir: host.DefaultDataDir,
		EvidenceKeys: func(ctx context.Context, o ServerDBRequest, rotate bool) (ServerEvidenceKeys, error) {
			r, err := host.EvidenceKeys(ctx, host.Options{DataDir: o.DataDir, DatabaseURL: o.DatabaseURL}, rotate)
			out := ServerEvidenceKeys{Rotated: r.Rotated, Keys: []ServerEvidenceKey{}}
			for _, k := range r.Keys {
				out.Keys = append(out.Keys, ServerEvidenceKey{Kid: k.Kid, Status: k.Status, Alg: k.Alg, X: k.X})
			}
			return out, err
		},
		SupportOperators: func(ctx context.Context, o ServerDBRequest, action, email string) (ServerSupportOperators, error) {
			r, err := host.SupportOperators(ctx, host.Options{DataDir: o.DataDir, DatabaseURL: o.DatabaseURL}, action, email)
			if errors.Is(err, store.ErrNotFound) {
				err = fmt.Errorf("%w: %w", ErrServerNotFound, err)
			}
			out := ServerSupportOperators{Changed: r.Changed, Operators: []ServerSupportOperator{}}
			for _, op := range r.Operators {
				out.Operators = append(out.Operators, ServerSupportOperator{UserID: op.UserID, Email: op.Email, GrantedBy: op.GrantedBy, GrantedAt: op.GrantedAt})
			}
			return out, err
		},
		Migrate: func(ctx context.Context, o ServerDBRequest) (ServerMigration, error) {
			m, err := host.Migrate(ctx, host.Options{DataDir: o.DataDir, DatabaseURL: o.DatabaseURL})
			return ServerMigration(m), err
		},
		Export: func(ctx context.Context, o ServerDBRequest, w io.Writer) (ServerDumpSummary, error) {
			s, err := host.Export(ctx, host.Options{DataDir: o.DataDir, DatabaseURL: o.DatabaseURL}, w)
			return ServerDumpSummary(s), err
		},
		Import: func(ctx context.Context, o ServerDBRequest, r io.Reader) (ServerDumpSummary, error) {
			s, err := host.Import(ctx, host.Options{DataDir: o.DataDir, DatabaseURL: o.DatabaseURL}, r)
			return ServerDumpSummary(s), err
		},
	}}
}
