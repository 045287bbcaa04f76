// Package webhooks is the server side of integration webhooks: the stored
// form of an endpoint (inbound source or outbound receiver) with its sealed
// secrets, the guard on outbound targets, the retry schedule, and the
// dispatcher that delivers the store's outbox with Standard Webhooks
// signatures (server/webhooksig).
package webhooks

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	"reeve.dev/reeve/server/secrets"
	"reeve.dev/reeve/server/store"
)

// Directions of an endpoint.
const (
	Inbound  = "inbound"  // a provider posts to /api/webhooks/{provider}/events
	Outbound = "outbound" // reeve posts its events to URL
)

// PayloadVersion is the version of the outbound payload this server
// renders; repair-route-version moves an endpoint to it.
const PayloadVersion = "1"

// Secret is one sealed signing secret of an endpoint. Expires is set on a
// secret rotated out: it still signs (outbound) or verifies (inbound)
// until then.
type Secret struct {
	Sealed    string     `json:"sealed"` // base64 of the keyring's sealed record
	CreatedAt time.Time  `json:"created_at"`
	Expires   *time.Time `json:"expires_at,omitempty"`
}

// Endpoint is the attributes of a record of store.WebhookEndpointCollection.
type Endpoint struct {
	Direction      string         `json:"direction"`
	Provider       string         `json:"provider,omitempty"` // inbound: code-host, chat, tracker, payments-thin
	URL            string         `json:"url,omitempty"`      // outbound
	Events         []string       `json:"events,omitempty"`   // outbound: kinds, or "*"
	Description    string         `json:"description,omitempty"`
	Disabled       bool           `json:"disabled"`
	PayloadVersion string         `json:"payload_version,omitempty"`
	Secrets        []Secret       `json:"secrets"` // current first
	Registration   map[string]any `json:"registration,omitempty"`
	RotatedAt      *time.Time     `json:"rotated_at,omitempty"`
	RepairedAt     *time.Time     `json:"route_version_repaired_at,omitempty"`
}

// Decode reads an endpoint record's attributes.
func Decode(r store.Record) (Endpoint, error) {
	var e Endpoint
	if err := json.Unmarshal(r.Attributes, &e); err != nil {
		return Endpoint{}, fmt.Errorf("endpoint %s: %w", r.ID, err)
	}
	return e, nil
}

func secretName(endpointID string) string { return "integration-webhook/" + endpointID }

// SealSecret seals a plaintext secret for endpoint id.
func SealSecret(ring *secrets.Keyring, endpointID string, plain []byte, now time.Time) (Secret, error) {
	rec, err := ring.Seal(secretName(endpointID), plain)
	if err != nil {
		return Secret{}, err
	}
	return Secret{Sealed: base64.StdEncoding.EncodeToString(rec), CreatedAt: now.UTC()}, nil
}

// LiveSecrets opens the endpoint's secrets still valid at now, current
// first.
func (e Endpoint) LiveSecrets(ring *secrets.Keyring, endpointID string, now time.Time) ([][]byte, error) {
	var out [][]byte
	for _, s := range e.Secrets {
		if s.Expires != nil && !now.Before(*s.Expires) {
			continue
		}
		rec, err := base64.StdEncoding.DecodeString(s.Sealed)
		if err != nil {
			return nil, fmt.Errorf("endpoint %s: sealed secret: %w", endpointID, err)
		}
		plain, err := ring.Open(secretName(endpointID), rec)
		if err != nil {
			return nil, err
		}
		out = append(out, plain)
	}
	return out, nil
}

// Rotate puts a new current secret in front and keeps the previous
// current one until now+grace; secrets already rotated out and expired are
// dropped.
func (e *Endpoint) Rotate(next Secret, now time.Time, grace time.Duration) {
	keep := []Secret{next}
	for i, s := range e.Secrets {
		if s.Expires != nil && !now.Before(*s.Expires) {
			continue
		}
		if i == 0 {
			exp := now.Add(grace).UTC()
			s.Expires = &exp
		}
		keep = append(keep, s)
	}
	e.Secrets = keep
	t := now.UTC()
	e.RotatedAt = &t
}
