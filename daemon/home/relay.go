package home

import (
	"fmt"
	"time"
)

// RelayCredentials are what pairing gives a daemon: the install it became,
// the issue token that proves it, and where the server and relay are. They
// are written once approval arrives and read by the relay link.
type RelayCredentials struct {
	InstallID   string    `json:"install_id"`
	WorkspaceID string    `json:"workspace_id"`
	IssueToken  string    `json:"issue_token"`
	ServerURL   string    `json:"server_url"`
	AppURL      string    `json:"app_url,omitempty"`
	RelayURL    string    `json:"relay_url"`
	Worker      bool      `json:"worker,omitempty"`    // paired as a team worker profile
	Transport   string    `json:"transport,omitempty"` // polling or relay
	PairedAt    time.Time `json:"paired_at"`
	// AutoUnlock lets remote clients control the daemon without an unlock
	// on the machine, for AutoUnlockTTL seconds per unlock (300..3600).
	AutoUnlock    bool `json:"auto_unlock"`
	AutoUnlockTTL int  `json:"auto_unlock_ttl_seconds"`
	// IssueTokenIn is "keychain" in the file when the issue token is kept
	// in the OS keychain instead.
	IssueTokenIn string `json:"issue_token_in,omitempty"`
}

// RelayFile holds the relay credentials.
func (d Dir) RelayFile() string { return d.path("relay.json") }

// WriteRelayCredentials persists the credentials (0600, atomically); with
// the keychain key store the issue token goes there, not in the file.
func (d Dir) WriteRelayCredentials(c RelayCredentials) error {
	kc, err := d.inKeychain()
	if err != nil {
		return err
	}
	if kc {
		if err := d.keychain().Set(secretIssueToken, []byte(c.IssueToken)); err != nil {
			return err
		}
		c.IssueToken, c.IssueTokenIn = "", "keychain"
	} else {
		c.IssueTokenIn = ""
	}
	return writeJSON(d.RelayFile(), c)
}

// ReadRelayCredentials reads them; fs.ErrNotExist when the daemon is not
// paired.
func (d Dir) ReadRelayCredentials() (RelayCredentials, error) {
	var c RelayCredentials
	if err := readJSON(d.RelayFile(), &c); err != nil {
		return c, err
	}
	if c.IssueTokenIn == "keychain" {
		tok, err := d.secret(secretIssueToken)
		if err != nil {
			return c, fmt.Errorf("relay credentials: the issue token is not in the OS keychain: %v", err)
		}
		c.IssueToken, c.IssueTokenIn = tok, ""
	}
	return c, nil
}
