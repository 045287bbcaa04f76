package cli

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"reeve.dev/reeve/server/sdk"
)

// maxEvidenceFile bounds what `reeve evidence verify` reads.
const maxEvidenceFile = 256 << 20

type evidenceVerifyOptions struct {
	env    *Env
	file   string
	server string
	key    string
	json   bool
}

func newEvidenceCmd(env *Env) *cobra.Command {
	opts := &evidenceVerifyOptions{env: env}
	verify := &cobra.Command{
		Use:   "verify FILE [--server URL | --key FILE]",
		Short: "Verify a signed export (a session's receipt-export or trace-export, a review packet's export) offline",
		Long: "Checks that FILE is byte for byte a signed export of a reeve server: the Ed25519 signature over its payload with the key it names,\n" +
			"and the events' hash chain (complete, in order, unchanged). The key comes from --key (a JWKS, one JWK, or a base64 public key)\n" +
			"or from the server's /api/.well-known/jwks.json (--server). Exit 0: verified; 8: it does not verify.",
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.file = args[0]
			return runEvidenceVerify(cmd.Context(), opts)
		},
	}
	f := verify.Flags()
	f.StringVar(&opts.server, "server", "", "control plane URL whose published keys to trust")
	f.StringVar(&opts.key, "key", "", "file with the public key(s): a JWKS, a JWK, or base64 Ed25519")
	f.BoolVar(&opts.json, "json", false, "print the verified summary as JSON")
	return newGroupCmd("evidence", "Signed evidence of sessions", verify)
}

// evidenceSummary is what a verified bundle says.
type evidenceSummary struct {
	Verified    bool   `json:"verified"`
	Kind        string `json:"kind"`
	KeyID       string `json:"kid"`
	WorkspaceID string `json:"workspace_id"`
	SessionID   string `json:"session_id,omitempty"`
	// ReviewPacketID is set for a review packet's export (its events are
	// the packet's evidence links).
	ReviewPacketID string    `json:"review_packet_id,omitempty"`
	IssuedAt       time.Time `json:"issued_at"`
	Events         int       `json:"events"`
	Decisions      int       `json:"decisions"`
	ChainHead      string    `json:"chain_head"`
}

func runEvidenceVerify(ctx context.Context, opts *evidenceVerifyOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if (opts.server == "") == (opts.key == "") {
		return exitf(ExitUsage, "give exactly one of --server URL or --key FILE")
	}
	data, err := readBounded(opts.file, maxEvidenceFile)
	if err != nil {
		return withExit(ExitNotFound, err)
	}
	var keys sdk.JWKS
	if opts.key != "" {
		raw, err := readBounded(opts.key, 1<<20)
		if err != nil {
			return withExit(ExitNotFound, err)
		}
		if keys, err = parseKeys(raw); err != nil {
			return withExit(ExitUsage, fmt.Errorf("--key %s: %w", opts.key, err))
		}
	} else {
		if keys, err = fetchKeys(ctx, opts.server); err != nil {
			return err
		}
	}
	b, err := sdk.VerifyEvidence(data, keys)
	if err != nil {
		if errors.Is(err, sdk.ErrEvidence) {
			return withExit(ExitInvalid, fmt.Errorf("%s: %w", opts.file, err))
		}
		return err
	}
	var signed sdk.EvidenceEnvelope
	_ = json.Unmarshal(data, &signed)
	sum := evidenceSummary{Verified: true, Kind: b.Kind, KeyID: signed.Data.KeyID, WorkspaceID: b.WorkspaceID, SessionID: b.SessionID,
		ReviewPacketID: b.ReviewPacketID, IssuedAt: b.IssuedAt, Events: len(b.Events), Decisions: len(b.Decisions), ChainHead: b.ChainHead}
	if opts.json {
		return writeJSON(opts.env.Out, sum)
	}
	if b.ReviewPacketID != "" {
		_, err = fmt.Fprintf(opts.env.Out, "verified review packet %s (workspace %s): %d evidence links, %d decisions, signed by %s at %s\nchain head %s\n",
			sum.ReviewPacketID, sum.WorkspaceID, sum.Events, sum.Decisions, sum.KeyID, sum.IssuedAt.Format(time.RFC3339), sum.ChainHead)
		return err
	}
	_, err = fmt.Fprintf(opts.env.Out, "verified %s of session %s (workspace %s): %d events, %d decisions, signed by %s at %s\nchain head %s\n",
		sum.Kind, sum.SessionID, sum.WorkspaceID, sum.Events, sum.Decisions, sum.KeyID, sum.IssuedAt.Format(time.RFC3339), sum.ChainHead)
	return err
}

func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return data, nil
}

// parseKeys reads a JWKS, a single JWK, or a bare base64 Ed25519 public
// key (given the kid "key" — it then verifies a bundle of any kid).
func parseKeys(raw []byte) (sdk.JWKS, error) {
	var set sdk.JWKS
	if json.Unmarshal(raw, &set) == nil && len(set.Keys) > 0 {
		return set, nil
	}
	var one sdk.JWK
	if json.Unmarshal(raw, &one) == nil && one.X != "" {
		return sdk.JWKS{Keys: []sdk.JWK{one}}, nil
	}
	s := strings.TrimSpace(string(raw))
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) == ed25519.PublicKeySize {
			return sdk.JWKS{Keys: []sdk.JWK{{Kty: "OKP", Crv: "Ed25519", X: base64.RawURLEncoding.EncodeToString(b), Kid: "*"}}}, nil
		}
	}
	return sdk.JWKS{}, errors.New("not a JWKS, a JWK or a base64 Ed25519 public key")
}

func fetchKeys(ctx context.Context, server string) (sdk.JWKS, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var keys sdk.JWKS
	c := &sdk.Client{BaseURL: strings.TrimRight(server, "/"), HTTP: &http.Client{Timeout: 30 * time.Second}}
	if _, err := c.Do(ctx, "GET", "/api/.well-known/jwks.json", nil, &keys); err != nil {
		return sdk.JWKS{}, withExit(ExitNotRunning, fmt.Errorf("fetch the server's keys: %w", err))
	}
	return keys, nil
}
