package auth

import (
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Relay roles of spec 5 rule 3.
const (
	RelayRoleDaemon = "workspace-daemon"
	RelayRoleClient = "client"
)

// RelayClaims are the claims of a relay JWT: which workspace and (for a
// daemon) which runtime target it may join as.
type RelayClaims struct {
	Workspace       string `json:"wid"`
	Role            string `json:"role"`
	RuntimeTargetID string `json:"rtid,omitempty"`
	jwt.RegisteredClaims
}

// RelaySigner issues and verifies short-lived relay JWTs (HS256). The key
// lives in the store so that every replica sharing the database agrees.
type RelaySigner struct {
	Key    []byte
	Issuer string
	TTL    time.Duration
	Now    func() time.Time
}

const relayAudience = "reeve-relay"

func (s *RelaySigner) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *RelaySigner) ttl() time.Duration {
	if s.TTL > 0 {
		return s.TTL
	}
	return 10 * time.Minute
}

// Sign issues a token for subject (an install or user id).
func (s *RelaySigner) Sign(subject, workspace, role, runtimeTarget string) (string, time.Time, error) {
	if len(s.Key) < 32 {
		return "", time.Time{}, errors.New("sign relay token: key too short")
	}
	now := s.now()
	exp := now.Add(s.ttl())
	c := RelayClaims{
		Workspace:       workspace,
		Role:            role,
		RuntimeTargetID: runtimeTarget,
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    s.Issuer,
			Subject:   subject,
			Audience:  jwt.ClaimStrings{relayAudience},
			IssuedAt:  jwt.NewNumericDate(now),
			NotBefore: jwt.NewNumericDate(now.Add(-30 * time.Second)),
			ExpiresAt: jwt.NewNumericDate(exp),
		},
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(s.Key)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("sign relay token: %w", err)
	}
	return tok, exp, nil
}

// Verify checks signature, algorithm, issuer, audience and lifetime.
func (s *RelaySigner) Verify(token string) (*RelayClaims, error) {
	var c RelayClaims
	_, err := jwt.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return s.Key, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithIssuer(s.Issuer),
		jwt.WithAudience(relayAudience),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(s.now),
	)
	if err != nil {
		return nil, fmt.Errorf("verify relay token: %w", err)
	}
	if c.Workspace == "" || (c.Role != RelayRoleDaemon && c.Role != RelayRoleClient) {
		return nil, errors.New("verify relay token: missing workspace or role")
	}
	return &c, nil
}
