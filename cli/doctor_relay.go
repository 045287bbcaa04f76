package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"time"

	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/server/sdk"
)

// doctorRelay is the relay part of `reeve doctor`: the pairing persisted in
// <home>/relay.json (never its issue token) and whether the control plane
// still accepts that credential.
type doctorRelay struct {
	State         string     `json:"state"` // not paired, paired, unreadable
	ServerURL     string     `json:"server_url,omitempty"`
	AppURL        string     `json:"app_url,omitempty"`
	RelayURL      string     `json:"relay_url,omitempty"`
	WorkspaceID   string     `json:"workspace_id,omitempty"`
	InstallID     string     `json:"install_id,omitempty"`
	Worker        bool       `json:"worker,omitempty"`
	Transport     string     `json:"transport,omitempty"`
	AutoUnlock    bool       `json:"auto_unlock"`
	AutoUnlockTTL int        `json:"auto_unlock_ttl_seconds,omitempty"`
	PairedAt      *time.Time `json:"paired_at,omitempty"`
	// Credential is accepted, refused (detached, retired or rotated),
	// unreachable, or unchecked (--offline).
	Credential string     `json:"credential,omitempty"`
	LastSeenAt *time.Time `json:"last_seen_at,omitempty"`
	Detail     string     `json:"detail,omitempty"`
}

// relayState reads the pairing and, unless offline, asks the control plane
// who the issue token belongs to: GET /api/runtime/install, a read that
// changes nothing there, so doctor stays read-only.
func (h homeFlag) relayState(ctx context.Context, dir home.Dir, offline bool) (doctorRelay, *doctorCheck) {
	rc, err := dir.ReadRelayCredentials()
	if errors.Is(err, fs.ErrNotExist) {
		return doctorRelay{State: "not paired"}, nil
	}
	if err != nil {
		return doctorRelay{State: "unreadable", Detail: err.Error()}, &doctorCheck{Name: "relay credentials", OK: false, Detail: err.Error()}
	}
	r := doctorRelay{
		State: "paired", ServerURL: rc.ServerURL, AppURL: rc.AppURL, RelayURL: rc.RelayURL,
		WorkspaceID: rc.WorkspaceID, InstallID: rc.InstallID, Worker: rc.Worker, Transport: rc.Transport,
		AutoUnlock: rc.AutoUnlock, AutoUnlockTTL: rc.AutoUnlockTTL,
	}
	if !rc.PairedAt.IsZero() {
		r.PairedAt = &rc.PairedAt
	}
	if offline {
		r.Credential = "unchecked"
		return r, nil
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c := &sdk.Client{BaseURL: rc.ServerURL, Token: rc.IssueToken, HTTP: &http.Client{Timeout: 5 * time.Second}}
	in, err := c.RuntimeInstall(cctx)
	var ae *sdk.APIError
	switch {
	case err == nil:
		r.Credential, r.LastSeenAt = "accepted", in.LastSeenAt
		return r, &doctorCheck{Name: "relay credential", OK: true, Detail: fmt.Sprintf("%s accepts install %s", rc.ServerURL, rc.InstallID)}
	case errors.As(err, &ae) && ae.Status == http.StatusUnauthorized:
		r.Credential = "refused"
		r.Detail = "the control plane refuses this install's credential: it was detached, or replaced by a newer pairing of this machine; run `" + h.reeve("pair") + "` again"
	case errors.As(err, &ae):
		r.Credential = "refused"
		r.Detail = fmt.Sprintf("%d %s: %s", ae.Status, ae.Body.Code, ae.Body.Message)
	default:
		r.Credential = "unreachable"
		r.Detail = err.Error()
	}
	return r, &doctorCheck{Name: "relay credential", OK: false, Detail: r.Detail}
}

func describeRelay(r doctorRelay) []string {
	if r.State != "paired" {
		if r.Detail != "" {
			return []string{r.State + ": " + r.Detail}
		}
		return []string{r.State}
	}
	lines := []string{fmt.Sprintf("paired: install %s in workspace %s", r.InstallID, r.WorkspaceID)}
	lines = append(lines, "  server "+r.ServerURL+", relay "+r.RelayURL)
	mode := "remote control locked until unlocked on this machine"
	if r.AutoUnlock {
		mode = fmt.Sprintf("auto-unlock for %ds", r.AutoUnlockTTL)
	}
	profile := "developer daemon"
	if r.Worker {
		profile = "team worker"
	}
	lines = append(lines, fmt.Sprintf("  %s, %s transport, %s", profile, r.Transport, mode))
	cred := "credential " + r.Credential
	if r.LastSeenAt != nil {
		cred += ", last seen " + r.LastSeenAt.Local().Format(time.DateTime)
	}
	if r.Detail != "" {
		cred += ": " + r.Detail
	}
	return append(lines, "  "+cred)
}

// relayProfileCheck finds a machine paired for the relay whose daemon does
// not launch with the relay profile: it never connects, so the machine is
// silently offline for the team. Nil when the home is not paired for the
// relay.
func (h homeFlag) relayProfileCheck(dir home.Dir, launch home.Launch, launchErr error) *doctorCheck {
	rc, err := dir.ReadRelayCredentials()
	if err != nil || rc.Transport != "relay" {
		return nil
	}
	const name = "relay profile"
	switch {
	case errors.Is(launchErr, fs.ErrNotExist):
		return &doctorCheck{Name: name, OK: false, Detail: "paired for the relay but no launch settings are saved; start the daemon with `" + h.reeve("start --profile relay") + "`"}
	case launchErr != nil:
		return &doctorCheck{Name: name, OK: false, Detail: launchErr.Error()}
	case launch.Profile != "relay":
		return &doctorCheck{Name: name, OK: false, Detail: fmt.Sprintf("paired for the relay but the daemon launches with profile %s, so it never connects; run `%s` then `%s`", launch.Profile, h.reeve("stop"), h.reeve("start --profile relay"))}
	}
	return &doctorCheck{Name: name, OK: true, Detail: "the daemon launches with the relay profile"}
}
