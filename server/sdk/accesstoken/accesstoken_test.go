package accesstoken

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"reeve.dev/reeve/server/sdk"
)

func signAccess(t *testing.T, priv ed25519.PrivateKey, kid string, c Claims) string {
	t.Helper()
	in, err := SigningInput(kid, c)
	if err != nil {
		t.Fatal(err)
	}
	return in + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, []byte(in)))
}

// Each way an access token must fail, fails with its own reason.
func TestVerifyAccessTokenRefusals(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	keys := sdk.JWKS{Keys: []sdk.JWK{{Kty: "OKP", Crv: "Ed25519", X: base64.RawURLEncoding.EncodeToString(pub), Kid: "ev-1", Alg: "EdDSA"}}}
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	base := func() Claims {
		c := Claims{WorkspaceID: "ws1", RuntimeTargetID: "in1", WorkspaceRole: sdk.RoleMember, DefaultSessionRole: sdk.SessionViewer,
			Sessions: map[string]string{"s1": sdk.SessionApprover}}
		c.Subject, c.ExpiresAt = "user:7", jwt.NewNumericDate(now.Add(10*time.Minute))
		return c
	}
	good := signAccess(t, priv, "ev-1", base())
	c, err := Verify(good, keys, "ws1", "in1", now)
	if err != nil || c.SessionRole("s1") != sdk.SessionApprover || c.SessionRole("s2") != sdk.SessionViewer {
		t.Fatalf("good token: %+v %v", c, err)
	}
	expired := base()
	expired.ExpiresAt = jwt.NewNumericDate(now.Add(-time.Second))
	parts := strings.Split(good, ".")
	forgedClaims, _ := base64.RawURLEncoding.DecodeString(parts[1])
	forgedClaims = []byte(strings.Replace(string(forgedClaims), `"srole":"viewer"`, `"srole":"owner"`, 1))
	hs, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, base()).SignedString([]byte(strings.Repeat("k", 32)))
	for name, tc := range map[string]struct {
		tok, ws, rt, want string
	}{
		"expired":         {signAccess(t, priv, "ev-1", expired), "ws1", "in1", "expired"},
		"other workspace": {good, "ws2", "in1", "workspace"},
		"other machine":   {good, "ws1", "in2", "machine"},
		"forged":          {parts[0] + "." + base64.RawURLEncoding.EncodeToString(forgedClaims) + "." + parts[2], "ws1", "in1", "signature"},
		"unknown key":     {signAccess(t, other, "ev-2", base()), "ws1", "in1", "never learned"},
		"wrong key id":    {signAccess(t, other, "ev-1", base()), "ws1", "in1", "signature"},
		"HS256":           {hs, "ws1", "in1", "signature"},
		"empty":           {"", "ws1", "in1", "no access token"},
		"garbage":         {"a.b.c", "ws1", "in1", "refused"},
	} {
		_, err := Verify(tc.tok, keys, tc.ws, tc.rt, now)
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a refusal saying %q", name, err, tc.want)
		}
	}
}
