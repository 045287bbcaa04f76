// Package auth holds the credentials of the control plane: opaque bearer
// tokens (stored only as hashes), the principals they resolve to, the
// one-time login-link provider, and relay JWT signing.
package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"fmt"
	"strings"
)

// Token prefixes say what a plaintext is for, so a leaked token is easy to
// recognise and to route to the right lookup without trying every table.
const (
	PrefixSession  = "rvs_" // user login session (from the login callback)
	PrefixPersonal = "rvp_" // personal API token
	PrefixInstall  = "rvi_" // per-install issue token (daemon)
	PrefixLogin    = "rvl_" // one-time login link code
)

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// NewToken returns a fresh plaintext with the given prefix: 160 random bits.
func NewToken(prefix string) (string, error) {
	var b [20]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("new token: %w", err)
	}
	return prefix + strings.ToLower(b32.EncodeToString(b[:])), nil
}

// Hash is what the store keeps of a plaintext. The tokens carry 160 random
// bits, so a fast unsalted hash is enough: there is nothing to brute-force.
func Hash(plaintext string) string {
	sum := sha256.Sum256([]byte(plaintext))
	return hex.EncodeToString(sum[:])
}

// DisplayPrefix is the part of a plaintext safe to show in listings.
func DisplayPrefix(plaintext string) string {
	if len(plaintext) <= 10 {
		return plaintext
	}
	return plaintext[:10]
}

// Kind is the kind of principal behind a request.
type Kind int

const (
	KindNone   Kind = iota
	KindUser        // a human, by login session or personal API token
	KindDaemon      // an install, by its issue token
	KindRelay       // a holder of a relay JWT
	// KindRelayService is a relay instance, by the relay service credential.
	KindRelayService
	// KindRunner is a team worker, by its managed executor's runner
	// credential (rwc_) or by one lease's token (rwl_, LeaseID set).
	KindRunner
	// KindWebhook is a provider's delivery whose signature verified
	// against the workspace's inbound source. No credential yields it: the
	// ingestion handler sets it after the check, so that what the delivery
	// causes (its event, the runs its routes queue) names the provider
	// rather than nobody. It is refused wherever a workspace is scoped.
	KindWebhook
)

// Principal is who is calling. Workspace is fixed for daemons and relay
// tokens; users choose it per request and are checked against membership.
type Principal struct {
	Kind      Kind
	UserID    int64
	Email     string
	TokenID   string // user token id (session or personal)
	InstallID string
	Workspace string
	Role      string // relay JWT role claim
	// ExecutorID is a runner's managed executor; LeaseID is set when it
	// presented a lease token, which is good for that lease alone.
	ExecutorID string
	LeaseID    string
	// Provider and DeliveryID name a webhook delivery (KindWebhook).
	Provider   string
	DeliveryID string
}

// Actor is the audit-log name of p.
func (p Principal) Actor() string {
	switch p.Kind {
	case KindUser:
		return fmt.Sprintf("user:%d", p.UserID)
	case KindDaemon:
		return "install:" + p.InstallID
	case KindRelay:
		return "relay:" + p.InstallID
	case KindRelayService:
		return "relay-service"
	case KindRunner:
		return "executor:" + p.ExecutorID
	case KindWebhook:
		return "webhook:" + p.Provider
	default:
		return "anonymous"
	}
}

// RoleRank orders workspace roles; unknown roles rank below member.
func RoleRank(role string) int {
	switch role {
	case "owner":
		return 3
	case "admin":
		return 2
	case "member":
		return 1
	default:
		return 0
	}
}
