package auth

import (
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func TestTokensAreRandomAndHashed(t *testing.T) {
	a, _ := NewToken(PrefixPersonal)
	b, _ := NewToken(PrefixPersonal)
	if a == b || !strings.HasPrefix(a, PrefixPersonal) || len(a) < 30 {
		t.Fatalf("tokens %q %q", a, b)
	}
	if Hash(a) == Hash(b) || strings.Contains(Hash(a), a) || len(Hash(a)) != 64 {
		t.Fatalf("hash")
	}
	if DisplayPrefix(a) == a || !strings.HasPrefix(a, DisplayPrefix(a)) {
		t.Fatalf("display prefix %q", DisplayPrefix(a))
	}
}

func TestRelayJWT(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	s := &RelaySigner{Key: []byte(strings.Repeat("k", 32)), Issuer: "http://cp", Now: func() time.Time { return now }}
	tok, exp, err := s.Sign("inst1", "01ARZ3NDEKTSV4RRFFQ69G5FAV", RelayRoleDaemon, "inst1")
	if err != nil || !exp.Equal(now.Add(10*time.Minute)) {
		t.Fatalf("sign: %v %v", exp, err)
	}
	c, err := s.Verify(tok)
	if err != nil || c.Workspace != "01ARZ3NDEKTSV4RRFFQ69G5FAV" || c.Role != RelayRoleDaemon || c.Subject != "inst1" {
		t.Fatalf("verify: %+v %v", c, err)
	}
	other := &RelaySigner{Key: []byte(strings.Repeat("x", 32)), Issuer: "http://cp", Now: s.Now}
	if _, err := other.Verify(tok); err == nil {
		t.Fatal("a token signed with another key verified")
	}
	wrongIss := &RelaySigner{Key: s.Key, Issuer: "http://elsewhere", Now: s.Now}
	if _, err := wrongIss.Verify(tok); err == nil {
		t.Fatal("a token of another issuer verified")
	}
	late := &RelaySigner{Key: s.Key, Issuer: s.Issuer, Now: func() time.Time { return now.Add(11 * time.Minute) }}
	if _, err := late.Verify(tok); err == nil {
		t.Fatal("an expired token verified")
	}
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, RelayClaims{Workspace: "w", Role: RelayRoleClient, RegisteredClaims: jwt.RegisteredClaims{Issuer: "http://cp", Audience: jwt.ClaimStrings{relayAudience}, ExpiresAt: jwt.NewNumericDate(now.Add(time.Minute))}}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if _, err := s.Verify(none); err == nil {
		t.Fatal("alg none verified")
	}
	if _, _, err := (&RelaySigner{Key: []byte("short")}).Sign("a", "b", RelayRoleClient, ""); err == nil {
		t.Fatal("short key accepted")
	}
}
