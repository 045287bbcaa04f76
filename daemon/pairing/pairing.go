// Package pairing pairs a daemon home with a control plane (spec 3.1 and
// 4.2): it presents the home's trust anchor with a code — minted here or
// claimed from the web page — waits while a person approves it in the
// browser, and keeps the relay credentials the approval hands over. The
// command line (`reeve pair`) says what happens; the steps are here.
package pairing

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/sdk/e2e"
)

// CodeAlphabet is the server's: no 0/O or 1/I/L.
const CodeAlphabet = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"

// Errors of a pairing attempt. Refusals by the control plane are
// *sdk.APIError.
var (
	ErrBadCode   = errors.New("not a pairing code")
	ErrNoServer  = errors.New("no control plane to pair with")
	ErrDenied    = errors.New("the pairing was denied in the browser")
	ErrTimedOut  = errors.New("no decision in time")
	ErrCollected = errors.New("the pairing was approved but its credential was already collected by another `reeve pair`")
)

// NormalizeCode accepts a code as people type it ("abcd-efgh") and checks
// its shape before any request.
func NormalizeCode(s string) (string, error) {
	c := strings.ToUpper(strings.NewReplacer("-", "", " ", "").Replace(s))
	if len(c) != 8 || strings.Trim(c, CodeAlphabet) != "" {
		return "", fmt.Errorf("%w: %q is not 8 characters of %s", ErrBadCode, s, CodeAlphabet)
	}
	return c, nil
}

// ServerURL picks the control plane: the one asked for, else the
// environment's, else the one of the home's current pairing.
func ServerURL(asked, fromEnv string, dir home.Dir) (string, error) {
	s := asked
	if s == "" {
		s = fromEnv
	}
	if s == "" {
		if prev, err := dir.ReadRelayCredentials(); err == nil {
			s = prev.ServerURL
		}
	}
	if s == "" {
		return "", ErrNoServer
	}
	return strings.TrimRight(s, "/"), nil
}

// Options describe a pairing.
type Options struct {
	Home   home.Dir
	Server string // the control plane's URL
	// AppURL is the browser app; "" discovers it from the server.
	AppURL string
	// Code is a code minted on the web page to claim; "" mints one here.
	Code      string
	Name      string // the machine's name on the approval page
	Worker    bool
	Transport string // polling or relay
	// AutoUnlock and AutoUnlockTTL (seconds, clamped) are kept with the
	// credentials for the relay link.
	AutoUnlock    bool
	AutoUnlockTTL int
	HTTP          *http.Client
}

// Attempt is a code presented to the control plane, waiting for a
// decision.
type Attempt struct {
	opts        Options
	client      *sdk.Client
	code        sdk.PairingCode
	appURL      string
	relayURL    string
	Fingerprint string // of the home's trust anchor, as the approval page shows it
}

// Begin makes sure the home has a trust anchor and presents it with a
// code: minted, or the one to claim.
func Begin(ctx context.Context, opts Options) (*Attempt, error) {
	if err := opts.Home.Prepare(); err != nil {
		return nil, err
	}
	key, err := opts.Home.EnsureAnchor()
	if err != nil {
		return nil, err
	}
	pub := key.PublicKey().Bytes()
	hc := opts.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	a := &Attempt{opts: opts, client: &sdk.Client{BaseURL: opts.Server, HTTP: hc}, Fingerprint: e2e.Fingerprint(pub)}
	a.appURL = strings.TrimRight(opts.AppURL, "/")
	if d, err := a.client.Discover(ctx); err == nil {
		if a.appURL == "" {
			a.appURL = strings.TrimRight(d.AppURL, "/")
		}
		a.relayURL = d.RelayURL
	} else if a.appURL == "" {
		return nil, fmt.Errorf("discover the app at %s: %w (pass --app-url to skip discovery)", opts.Server, err)
	}
	req := sdk.PairingMachineRequest{Name: opts.Name, AnchorPublicKey: base64.StdEncoding.EncodeToString(pub), Worker: opts.Worker, Transport: opts.Transport}
	if opts.Code == "" {
		a.code, err = a.client.MintPairingCode(ctx, req)
	} else {
		a.code, err = a.client.ClaimPairingCode(ctx, opts.Code, req)
	}
	if err != nil {
		return nil, fmt.Errorf("pairing code: %w", err)
	}
	return a, nil
}

// Code is the pairing code and when it expires.
func (a *Attempt) Code() (string, time.Time) { return a.code.Code, a.code.ExpiresAt }

// ApproveURL is the page where a person approves the code.
func (a *Attempt) ApproveURL() string { return a.appURL + "/pair?code=" + a.code.Code }

// State is a pairing code's state while it waits, for progress reports.
type State struct {
	State     string // pending, claimed
	ExpiresAt time.Time
	// ClaimedHere is a code this machine minted that a workspace has
	// claimed: only the approval is missing.
	ClaimedHere bool
	// Unreachable is the error of a status read that did not reach the
	// server (it may be restarting); the wait goes on.
	Unreachable error
}

// Wait polls the code's status every interval until a decision, until
// deadline (ErrTimedOut), or until ctx ends. progress hears each change of
// state and, while the server cannot be reached, each failed read.
func (a *Attempt) Wait(ctx context.Context, interval time.Duration, deadline time.Time, progress func(State)) (*sdk.RelayCredentials, error) {
	if interval <= 0 {
		interval = 2 * time.Second
	}
	if progress == nil {
		progress = func(State) {}
	}
	wait := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait = interval
		if time.Now().After(deadline) {
			return nil, ErrTimedOut
		}
		st, err := a.client.PairingStatus(ctx, a.code.Code, a.code.StatusToken)
		var ae *sdk.APIError
		switch {
		case errors.As(err, &ae) && ae.Status == http.StatusTooManyRequests:
			wait = max(interval, ae.RetryAfter)
			continue
		case errors.As(err, &ae):
			return nil, fmt.Errorf("pairing status: %w", err)
		case err != nil:
			progress(State{Unreachable: err})
			continue
		}
		switch st.State {
		case sdk.PairingApproved:
			if st.RelayCredentials == nil {
				return nil, ErrCollected
			}
			return st.RelayCredentials, nil
		case sdk.PairingDenied:
			return nil, ErrDenied
		}
		progress(State{State: st.State, ExpiresAt: st.ExpiresAt, ClaimedHere: st.State == sdk.PairingClaimed && a.code.Initiator == "daemon"})
	}
}

// Save keeps the approved credentials in the home (0600), with the
// settings of the pairing, and returns them.
func (a *Attempt) Save(creds *sdk.RelayCredentials) (home.RelayCredentials, error) {
	relayURL, appURL := a.relayURL, a.appURL
	if creds.RelayURL != "" {
		relayURL = creds.RelayURL
	}
	if creds.AppURL != "" && a.opts.AppURL == "" {
		appURL = strings.TrimRight(creds.AppURL, "/")
	}
	rc := home.RelayCredentials{
		InstallID: creds.InstallID, WorkspaceID: creds.WorkspaceID, IssueToken: creds.IssueToken,
		ServerURL: a.opts.Server, AppURL: appURL, RelayURL: relayURL,
		Worker: a.opts.Worker, Transport: a.opts.Transport, PairedAt: time.Now().UTC(),
		AutoUnlock: a.opts.AutoUnlock, AutoUnlockTTL: wire.ClampUnlockTTL(a.opts.AutoUnlockTTL),
	}
	if err := a.opts.Home.WriteRelayCredentials(rc); err != nil {
		return rc, fmt.Errorf("save relay credentials: %w", err)
	}
	// The keys that sign remote clients' access tokens, learned now from
	// the server this pairing trusted.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := LearnServerKeys(ctx, a.opts.Home, a.opts.Server, a.client.HTTP); err != nil {
		return rc, err
	}
	return rc, nil
}
