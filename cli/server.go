package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// defaultServerListen is where `reeve server` listens unless told otherwise.
const defaultServerListen = "127.0.0.1:8080"

// ServerRun is what `reeve server` hands to the control plane.
type ServerRun struct {
	Listen, DataDir, DatabaseURL, PublicURL, AppURL, RelayURL, OwnerEmail string
	// MasterKeyFile is the master key file ("" for the data directory's).
	MasterKeyFile string
	Out           io.Writer // the one-time login link
	Logger        *slog.Logger
	// Ready receives the bound address and origin once listening.
	Ready func(addr, url string)
	// AllowPrivateWebhookTargets lets outbound webhook endpoints point at
	// private and loopback addresses; WebhookRate is the inbound
	// deliveries per minute per workspace and source (0: the default).
	AllowPrivateWebhookTargets bool
	WebhookRate                int
	// RelayTokenTTL is the lifetime of relay JWTs and the access tokens
	// issued with them (0: the default, 10 minutes).
	RelayTokenTTL time.Duration
}

// ServerTokenRequest asks for an operator token.
type ServerTokenRequest struct {
	DataDir, DatabaseURL, Email, Name string
}

// ServerTokenResult is a created operator token.
type ServerTokenResult struct {
	Token            string
	TokenID          string
	UserID           int64
	CreatedWorkspace bool
}

// ServerPrograms are the control plane's entry points, wired in by main so
// that cli links no server internals.
type ServerPrograms struct {
	Run         func(ctx context.Context, o ServerRun) error
	CreateToken func(ctx context.Context, o ServerTokenRequest) (ServerTokenResult, error)
	// RelayCredential returns the relay service credential of a data
	// directory (Email and Name are unused).
	RelayCredential func(ctx context.Context, o ServerTokenRequest) (string, error)
	DefaultDataDir  func() string
	// Invite creates a workspace invitation on the data directory.
	Invite func(ctx context.Context, o ServerInviteRequest) (ServerInviteResult, error)
	// LoginLink issues a one-time login link for an existing user on the
	// data directory; an unknown user wraps ErrServerNotFound.
	LoginLink func(ctx context.Context, o ServerLoginLinkRequest) (ServerLoginLinkResult, error)
	// EvidenceKeys lists the evidence signing keys, rotating first when
	// asked, on the database directly.
	EvidenceKeys func(ctx context.Context, o ServerDBRequest, rotate bool) (ServerEvidenceKeys, error)
	// Migrate, Export and Import work on the database directly.
	Migrate func(ctx context.Context, o ServerDBRequest) (ServerMigration, error)
	Export  func(ctx context.Context, o ServerDBRequest, w io.Writer) (ServerDumpSummary, error)
	Import  func(ctx context.Context, o ServerDBRequest, r io.Reader) (ServerDumpSummary, error)
	// RotateMasterKey rotates the master key and re-wraps the store.
	RotateMasterKey func(ctx context.Context, o ServerMasterKeyRequest) (ServerMasterKeyRotation, error)
	// SupportOperators grants, revokes ("grant", "revoke" with an email)
	// or lists ("list") support operators; revoking an unknown user or a
	// non-operator wraps ErrServerNotFound.
	SupportOperators func(ctx context.Context, o ServerDBRequest, action, email string) (ServerSupportOperators, error)
}

// ErrServerNotFound marks a control-plane error about something that does
// not exist (exit code 4).
var ErrServerNotFound = errors.New("not found")

// ServerInviteRequest asks for an invitation.
type ServerInviteRequest struct {
	DataDir, DatabaseURL, Workspace, Email, Role, AppURL string
	TTL                                                  time.Duration
}

// ServerInviteResult is a created invitation with its single-use link.
type ServerInviteResult struct {
	ID, Email, Role, Token, Link string
	ExpiresAt                    time.Time
}

type serverOptions struct {
	env         *Env
	listen      string
	dataDir     string
	databaseURL string
	publicURL   string
	appURL      string
	relayURL    string
	ownerEmail  string
	keyFile     string
	// ready, when set, receives the bound origin once listening (tests).
	ready func(url string)

	allowPrivateHooks bool
	webhookRate       int
	relayTokenTTL     time.Duration
}

func newServerCmd(env *Env) *cobra.Command {
	opts := &serverOptions{env: env}
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the hosted control plane (REST API on one port, SQLite by default)",
		Long: "reeve server runs the control plane: the REST API under /api, with a SQLite file in its data directory by default.\n" +
			"On first start it creates an owner and prints a one-time login link on stdout.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServer(cmd.Context(), opts) },
	}
	f := cmd.Flags()
	f.StringVar(&opts.listen, "listen", defaultServerListen, "address to listen on (host:port)")
	f.StringVar(&opts.dataDir, "data-dir", "", "data directory (default "+serverDataDir(env)+")")
	f.StringVar(&opts.databaseURL, "database-url", "", "database URL: postgres://USER@HOST:PORT/DB for PostgreSQL (several replicas), or sqlite:PATH (default: a sqlite file in the data directory)")
	f.StringVar(&opts.publicURL, "public-url", "", "public origin of the API (default http://<listen address>)")
	f.StringVar(&opts.appURL, "app-url", "", "browser app URL advertised to clients (default: the server's origin)")
	f.StringVar(&opts.relayURL, "relay-url", "", "relay URL advertised to clients (default: the server's origin)")
	f.StringVar(&opts.ownerEmail, "owner-email", "owner@localhost", "email of the owner created on first start")
	f.StringVar(&opts.keyFile, "master-key-file", "", "file of the master key that seals stored secrets, 0600 (default $"+EnvMasterKeyFile+", else master.key in the data directory; REEVE_MASTER_KEY overrides both)")
	f.BoolVar(&opts.allowPrivateHooks, "allow-private-webhook-targets", false, "let outbound webhook endpoints point at private, loopback and link-local addresses (never at the server itself)")
	f.IntVar(&opts.webhookRate, "webhook-rate", 0, "inbound webhook deliveries allowed per minute per workspace and source (default 600)")
	f.DurationVar(&opts.relayTokenTTL, "relay-token-ttl", 0, "lifetime of relay tokens and the access tokens issued with them, 10s to 24h (default 10m); a role changed or taken away reaches a live browser channel at its next refresh")
	cmd.AddCommand(newGroupCmd("token", "Manage API tokens as an operator", newServerTokenCreateCmd(env)))
	cmd.AddCommand(newServerRelayCredentialCmd(env))
	cmd.AddCommand(newServerInviteCmd(env), newServerLoginLinkCmd(env))
	cmd.AddCommand(newServerMigrateCmd(env), newServerExportCmd(env), newServerImportCmd(env))
	cmd.AddCommand(newServerMasterKeyCmd(env))
	cmd.AddCommand(newServerKeysCmd(env))
	cmd.AddCommand(newServerSupportCmd(env))
	return cmd
}

func runServer(ctx context.Context, opts *serverOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if _, _, err := net.SplitHostPort(opts.listen); err != nil {
		return exitf(ExitUsage, "--listen %q: want host:port", opts.listen)
	}
	if opts.relayTokenTTL != 0 && (opts.relayTokenTTL < 10*time.Second || opts.relayTokenTTL > 24*time.Hour) {
		return exitf(ExitUsage, "--relay-token-ttl %s: want 10s to 24h", opts.relayTokenTTL)
	}
	if opts.env.Programs.Server.Run == nil {
		return exitf(ExitFailure, "this build of reeve has no control plane")
	}
	logger := slog.New(slog.NewTextHandler(opts.env.Err, &slog.HandlerOptions{Level: slog.LevelInfo}))
	err := opts.env.Programs.Server.Run(ctx, ServerRun{
		Listen: opts.listen, DataDir: opts.dataDir, DatabaseURL: opts.databaseURL,
		PublicURL: opts.publicURL, AppURL: opts.appURL, RelayURL: opts.relayURL,
		OwnerEmail: opts.ownerEmail, MasterKeyFile: masterKeyFile(opts.env, opts.keyFile), Out: opts.env.Out, Logger: logger,
		AllowPrivateWebhookTargets: opts.allowPrivateHooks, WebhookRate: opts.webhookRate, RelayTokenTTL: opts.relayTokenTTL,
		Ready: func(addr, url string) {
			fmt.Fprintf(opts.env.Err, "reeve server listening on %s (API %s/api)\n", addr, url)
			if opts.ready != nil {
				opts.ready(url)
			}
		},
	})
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return withExit(ExitConflict, err)
		}
		if strings.Contains(err.Error(), "not supported") || strings.Contains(err.Error(), "unsupported") {
			return withExit(ExitUsage, err)
		}
		return dbError(err)
	}
	return nil
}

func serverDataDir(env *Env) string {
	if env.Programs.Server.DefaultDataDir == nil {
		return "a per-user directory"
	}
	return env.Programs.Server.DefaultDataDir()
}

type serverTokenOptions struct {
	env         *Env
	dataDir     string
	databaseURL string
	user        string
	name        string
	json        bool
}

func newServerTokenCreateCmd(e *Env) *cobra.Command {
	opts := &serverTokenOptions{env: e}
	cmd := &cobra.Command{
		Use:   "create --user EMAIL",
		Short: "Create a personal API token for a user (creating the user and a workspace if needed)",
		Long: "Creates the user if needed (as owner of a new workspace when they belong to none) and prints a personal API token on stdout.\n" +
			"For automation and recovery; works on the data directory directly, with or without a running server.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServerTokenCreate(cmd.Context(), opts) },
	}
	f := cmd.Flags()
	f.StringVar(&opts.dataDir, "data-dir", "", "data directory (default "+serverDataDir(e)+")")
	f.StringVar(&opts.databaseURL, "database-url", "", "database URL (overrides --data-dir)")
	f.StringVar(&opts.user, "user", "", "email of the user (required)")
	f.StringVar(&opts.name, "name", "operator", "name of the token")
	f.BoolVar(&opts.json, "json", false, "print as JSON")
	return cmd
}

// serverTokenInfo is the --json shape of `reeve server token create`.
type serverTokenInfo struct {
	Token            string `json:"token"`
	TokenID          string `json:"token_id"`
	UserID           int64  `json:"user_id"`
	CreatedWorkspace bool   `json:"created_workspace"`
}

func runServerTokenCreate(ctx context.Context, opts *serverTokenOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if opts.user == "" {
		return exitf(ExitUsage, "--user EMAIL is required")
	}
	if !strings.Contains(opts.user, "@") {
		return exitf(ExitUsage, "--user %q is not an email address", opts.user)
	}
	if opts.env.Programs.Server.CreateToken == nil {
		return exitf(ExitFailure, "this build of reeve has no control plane")
	}
	res, err := opts.env.Programs.Server.CreateToken(ctx, ServerTokenRequest{DataDir: opts.dataDir, DatabaseURL: opts.databaseURL, Email: opts.user, Name: opts.name})
	if err != nil {
		return err
	}
	if opts.json {
		return writeJSON(opts.env.Out, serverTokenInfo(res))
	}
	if res.CreatedWorkspace {
		fmt.Fprintf(opts.env.Err, "created a workspace owned by %s\n", opts.user)
	}
	_, err = fmt.Fprintln(opts.env.Out, res.Token)
	return err
}

type serverRelayCredentialOptions struct {
	env         *Env
	dataDir     string
	databaseURL string
}

func newServerRelayCredentialCmd(e *Env) *cobra.Command {
	opts := &serverRelayCredentialOptions{env: e}
	cmd := &cobra.Command{
		Use:   "relay-credential",
		Short: "Print the relay service credential that `reeve relay` presents to this server",
		Long: "Prints the relay service credential (rvr_...) on stdout. Give it to `reeve relay` through --credential-file or $" + RelayCredentialEnv + ".\n" +
			"It is derived from a secret in the server's database, so every server sharing that database accepts it.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServerRelayCredential(cmd.Context(), opts) },
	}
	f := cmd.Flags()
	f.StringVar(&opts.dataDir, "data-dir", "", "data directory (default "+serverDataDir(e)+")")
	f.StringVar(&opts.databaseURL, "database-url", "", "database URL (overrides --data-dir)")
	return cmd
}

func runServerRelayCredential(ctx context.Context, opts *serverRelayCredentialOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if opts.env.Programs.Server.RelayCredential == nil {
		return exitf(ExitFailure, "this build of reeve has no control plane")
	}
	c, err := opts.env.Programs.Server.RelayCredential(ctx, ServerTokenRequest{DataDir: opts.dataDir, DatabaseURL: opts.databaseURL})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(opts.env.Out, c)
	return err
}

type serverInviteOptions struct {
	env         *Env
	dataDir     string
	databaseURL string
	workspace   string
	email       string
	role        string
	appURL      string
	expires     time.Duration
	json        bool
}

func newServerInviteCmd(e *Env) *cobra.Command {
	opts := &serverInviteOptions{env: e}
	cmd := &cobra.Command{
		Use:   "invite --workspace ID --email EMAIL [--role member|admin|owner]",
		Short: "Invite someone to a workspace and print their single-use accept link",
		Long: "Creates an invitation on the data directory (with or without a running server) and prints its accept link on stdout.\n" +
			"The invitee opens the link signed in as that email and becomes a member with the role. The link works once and expires.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServerInvite(cmd.Context(), opts) },
	}
	f := cmd.Flags()
	f.StringVar(&opts.dataDir, "data-dir", "", "data directory (default "+serverDataDir(e)+")")
	f.StringVar(&opts.databaseURL, "database-url", "", "database URL (overrides --data-dir)")
	f.StringVar(&opts.workspace, "workspace", "", "workspace id (required; GET /api/workspaces lists yours)")
	f.StringVar(&opts.email, "email", "", "email of the invitee (required)")
	f.StringVar(&opts.role, "role", "member", "workspace role: member, admin or owner")
	f.StringVar(&opts.appURL, "app-url", "http://"+defaultServerListen, "origin of the server's pages, for the link")
	f.DurationVar(&opts.expires, "expires", 7*24*time.Hour, "how long the link works (at most 720h)")
	f.BoolVar(&opts.json, "json", false, "print as JSON")
	return cmd
}

// serverInviteInfo is the --json shape of `reeve server invite`.
type serverInviteInfo struct {
	ID        string    `json:"id"`
	Email     string    `json:"email"`
	Role      string    `json:"role"`
	ExpiresAt time.Time `json:"expires_at"`
	Token     string    `json:"token"`
	AcceptURL string    `json:"accept_url"`
}

func runServerInvite(ctx context.Context, opts *serverInviteOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	switch {
	case opts.workspace == "":
		return exitf(ExitUsage, "--workspace ID is required")
	case opts.email == "":
		return exitf(ExitUsage, "--email EMAIL is required")
	case !strings.Contains(opts.email, "@"):
		return exitf(ExitUsage, "--email %q is not an email address", opts.email)
	case opts.role != "member" && opts.role != "admin" && opts.role != "owner":
		return exitf(ExitUsage, "--role %q: want member, admin or owner", opts.role)
	case opts.expires < time.Minute || opts.expires > 720*time.Hour:
		return exitf(ExitUsage, "--expires %s: want between 1m and 720h", opts.expires)
	}
	if opts.env.Programs.Server.Invite == nil {
		return exitf(ExitFailure, "this build of reeve has no control plane")
	}
	res, err := opts.env.Programs.Server.Invite(ctx, ServerInviteRequest{DataDir: opts.dataDir, DatabaseURL: opts.databaseURL,
		Workspace: opts.workspace, Email: opts.email, Role: opts.role, AppURL: opts.appURL, TTL: opts.expires})
	if err != nil {
		if errors.Is(err, ErrServerNotFound) {
			return withExit(ExitNotFound, err)
		}
		return err
	}
	if opts.json {
		return writeJSON(opts.env.Out, serverInviteInfo{ID: res.ID, Email: res.Email, Role: res.Role, ExpiresAt: res.ExpiresAt, Token: res.Token, AcceptURL: res.Link})
	}
	fmt.Fprintf(opts.env.Err, "invited %s as %s; the link works once, until %s\n", res.Email, res.Role, res.ExpiresAt.Format(time.RFC3339))
	_, err = fmt.Fprintln(opts.env.Out, res.Link)
	return err
}

// ServerLoginLinkRequest asks for a login link.
type ServerLoginLinkRequest struct {
	DataDir, DatabaseURL, Email, AppURL string
	TTL                                 time.Duration
}

// ServerLoginLinkResult is an issued login link.
type ServerLoginLinkResult struct {
	Link      string
	ExpiresAt time.Time
}

type serverLoginLinkOptions struct {
	env         *Env
	dataDir     string
	databaseURL string
	email       string
	appURL      string
	expires     time.Duration
	json        bool
}

func newServerLoginLinkCmd(e *Env) *cobra.Command {
	opts := &serverLoginLinkOptions{env: e}
	cmd := &cobra.Command{
		Use:   "login-link --email EMAIL",
		Short: "Print a fresh one-time login link for a user",
		Long: "Issues a one-time login link for an existing user on the data directory (with or without a running server) and prints it on stdout.\n" +
			"The link opens the sign-in page; opening it spends nothing, the page's Sign in button does. Earlier links stay valid until used or expired.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServerLoginLink(cmd.Context(), opts) },
	}
	f := cmd.Flags()
	f.StringVar(&opts.dataDir, "data-dir", "", "data directory (default "+serverDataDir(e)+")")
	f.StringVar(&opts.databaseURL, "database-url", "", "database URL (overrides --data-dir)")
	f.StringVar(&opts.email, "email", "", "email of the user (required)")
	f.StringVar(&opts.appURL, "app-url", "http://"+defaultServerListen, "origin of the server's pages, for the link")
	f.DurationVar(&opts.expires, "expires", 24*time.Hour, "how long the link works (at most 168h)")
	f.BoolVar(&opts.json, "json", false, "print as JSON")
	return cmd
}

// serverLoginLinkInfo is the --json shape of `reeve server login-link`.
type serverLoginLinkInfo struct {
	Email     string    `json:"email"`
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expires_at"`
}

func runServerLoginLink(ctx context.Context, opts *serverLoginLinkOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	switch {
	case opts.email == "":
		return exitf(ExitUsage, "--email EMAIL is required")
	case !strings.Contains(opts.email, "@"):
		return exitf(ExitUsage, "--email %q is not an email address", opts.email)
	case opts.expires < time.Minute || opts.expires > 168*time.Hour:
		return exitf(ExitUsage, "--expires %s: want between 1m and 168h", opts.expires)
	case !strings.HasPrefix(opts.appURL, "http://") && !strings.HasPrefix(opts.appURL, "https://"):
		return exitf(ExitUsage, "--app-url %q: want an http:// or https:// origin", opts.appURL)
	}
	if opts.env.Programs.Server.LoginLink == nil {
		return exitf(ExitFailure, "this build of reeve has no control plane")
	}
	res, err := opts.env.Programs.Server.LoginLink(ctx, ServerLoginLinkRequest{DataDir: opts.dataDir, DatabaseURL: opts.databaseURL, Email: opts.email, AppURL: opts.appURL, TTL: opts.expires})
	if err != nil {
		if errors.Is(err, ErrServerNotFound) {
			return withExit(ExitNotFound, err)
		}
		return err
	}
	if opts.json {
		return writeJSON(opts.env.Out, serverLoginLinkInfo{Email: opts.email, URL: res.Link, ExpiresAt: res.ExpiresAt})
	}
	fmt.Fprintf(opts.env.Err, "one-time login link for %s, valid until %s:\n", opts.email, res.ExpiresAt.Format(time.RFC3339))
	_, err = fmt.Fprintln(opts.env.Out, res.Link)
	return err
}
