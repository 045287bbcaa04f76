package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// defaultRelayListen is where `reeve relay` listens unless told otherwise.
const defaultRelayListen = "127.0.0.1:8081"

// RelayCredentialEnv carries the relay service credential to `reeve relay`
// (the alternative to --credential-file; never a flag, which ps would show).
const RelayCredentialEnv = "REEVE_RELAY_CREDENTIAL"

// RelayRun is what `reeve relay` hands to the relay.
type RelayRun struct {
	Listen, ServerURL, PublicURL string
	// Credential is the relay service credential; never printed.
	Credential string
	Logger     *slog.Logger
	// Ready receives the bound address once listening.
	Ready func(addr string)
}

// RelayPrograms are the relay's entry points, wired in by main so that cli
// links no relay internals.
type RelayPrograms struct {
	Run func(ctx context.Context, o RelayRun) error
}

type relayOptions struct {
	env            *Env
	listen         string
	server         string
	publicURL      string
	credentialFile string
}

func newRelayCmd(env *Env) *cobra.Command {
	opts := &relayOptions{env: env}
	cmd := &cobra.Command{
		Use:   "relay --server URL",
		Short: "Run a relay instance against a control plane",
		Long: "reeve relay serves the relay WebSocket ({relay_url}/ws) as its own process. It admits connections through the server,\n" +
			"and shares presence and the message bus with the server's other relay instances, so a daemon on one instance and a\n" +
			"client on another still meet. The relay service credential comes from --credential-file or $" + RelayCredentialEnv + "\n" +
			"(print it with `reeve server relay-credential`). `reeve server` serves a relay on its own origin already.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runRelay(cmd.Context(), opts) },
	}
	f := cmd.Flags()
	f.StringVar(&opts.listen, "listen", defaultRelayListen, "address to listen on (host:port)")
	f.StringVar(&opts.server, "server", "", "control plane URL (required)")
	f.StringVar(&opts.publicURL, "public-url", "", "public origin of this relay, as clients reach it (default http://<listen address>)")
	f.StringVar(&opts.credentialFile, "credential-file", "", "file holding the relay service credential (default $"+RelayCredentialEnv+")")
	return cmd
}

func runRelay(ctx context.Context, opts *relayOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if _, _, err := net.SplitHostPort(opts.listen); err != nil {
		return exitf(ExitUsage, "--listen %q: want host:port", opts.listen)
	}
	if opts.server == "" {
		return exitf(ExitUsage, "--server URL is required")
	}
	if u, err := url.Parse(opts.server); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return exitf(ExitUsage, "--server %q: want an http(s) URL", opts.server)
	}
	cred, err := relayCredential(opts)
	if err != nil {
		return err
	}
	if opts.env.Programs.Relay.Run == nil {
		return exitf(ExitFailure, "this build of reeve has no relay")
	}
	logger := slog.New(slog.NewTextHandler(opts.env.Err, &slog.HandlerOptions{Level: slog.LevelInfo}))
	err = opts.env.Programs.Relay.Run(ctx, RelayRun{
		Listen: opts.listen, ServerURL: strings.TrimRight(opts.server, "/"), PublicURL: opts.publicURL,
		Credential: cred, Logger: logger,
		Ready: func(addr string) {
			pub := opts.publicURL
			if pub == "" {
				pub = "http://" + addr
			}
			fmt.Fprintf(opts.env.Err, "reeve relay listening on %s (relay URL %s, upgrade at %s/ws, control plane %s)\n", addr, pub, strings.TrimRight(pub, "/"), opts.server)
		},
	})
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return withExit(ExitConflict, err)
		}
		if strings.Contains(err.Error(), "refused the relay credential") {
			return withExit(ExitDenied, err)
		}
		return err
	}
	return nil
}

// relayCredential reads the credential from --credential-file, else the
// environment. Its value never appears in output or errors.
func relayCredential(opts *relayOptions) (string, error) {
	if opts.credentialFile != "" {
		b, err := os.ReadFile(opts.credentialFile)
		if err != nil {
			return "", exitf(ExitUsage, "--credential-file: %v", err)
		}
		if c := strings.TrimSpace(string(b)); c != "" {
			return c, nil
		}
		return "", exitf(ExitUsage, "--credential-file %s is empty", opts.credentialFile)
	}
	if c := strings.TrimSpace(opts.env.Getenv(RelayCredentialEnv)); c != "" {
		return c, nil
	}
	return "", exitf(ExitUsage, "the relay service credential is required: --credential-file FILE or $%s (see `reeve server relay-credential`)", RelayCredentialEnv)
}
