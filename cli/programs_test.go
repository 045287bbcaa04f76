package cli

import (
	"context"

	"reeve.dev/reeve/server/host"
)

// testPrograms wires the real control plane for the command tests, as main
// does for the binary.
func testPrograms() Programs {
	return Programs{Server: ServerPrograms{
		Run: func(ctx context.Context, o ServerRun) error {
			h, err := host.New(ctx, host.Options{
				Listen: o.Listen, DataDir: o.DataDir, DatabaseURL: o.DatabaseURL,
				PublicURL: o.PublicURL, AppURL: o.AppURL, RelayURL: o.RelayURL,
				OwnerEmail: o.OwnerEmail, Out: o.Out, Logger: o.Logger,
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
		CreateToken: func(ctx context.Context, o ServerTokenRequest) (ServerTokenResult, error) {
			r, err := host.CreateToken(ctx, host.TokenOptions{DataDir: o.DataDir, DatabaseURL: o.DatabaseURL, Email: o.Email, Name: o.Name})
			return ServerTokenResult{Token: r.Token, TokenID: r.TokenID, UserID: r.UserID, CreatedWorkspace: r.CreatedWorkspace}, err
		},
		DefaultDataDir: host.DefaultDataDir,
	}}
}
