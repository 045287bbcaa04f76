package remote

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/server/sdk/e2e"
)

func TestWSURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"http://127.0.0.1:8080", "ws://127.0.0.1:8080/ws?role=client&runtimeTargetId=T&workspaceId=W"},
		{"https://relay.example/", "wss://relay.example/ws?role=client&runtimeTargetId=T&workspaceId=W"},
		{"wss://relay.example/base/ws", "wss://relay.example/base/ws?role=client&runtimeTargetId=T&workspaceId=W"},
	} {
		got, err := WSURL(tc.in, "client", "W", "T")
		if err != nil || got != tc.want {
			t.Errorf("WSURL(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := WSURL("ftp://x", "client", "W", "T"); err == nil {
		t.Error("ftp relay URL accepted")
	}
}

func TestDialChecksOptionsFirst(t *testing.T) {
	k, _ := ecdh.X25519().GenerateKey(rand.Reader)
	other, _ := ecdh.X25519().GenerateKey(rand.Reader)
	base := Options{RelayURL: "http://127.0.0.1:1", WorkspaceID: "W", RuntimeTargetID: "T", Token: StaticToken("x")}
	o := base
	o.Anchor, o.Fingerprint = k.PublicKey().Bytes(), e2e.Fingerprint(other.PublicKey().Bytes())
	if _, err := Dial(context.Background(), o); !errors.Is(err, e2e.ErrFingerprint) {
		t.Fatalf("anchor and fingerprint disagree: %v", err)
	}
	o = base
	if _, err := Dial(context.Background(), o); err == nil || !strings.Contains(err.Error(), "Anchor or its Fingerprint") {
		t.Fatalf("no anchor: %v", err)
	}
	o.Anchor, o.RuntimeTargetID = k.PublicKey().Bytes(), ""
	if _, err := Dial(context.Background(), o); err == nil || !strings.Contains(err.Error(), "RuntimeTargetID") {
		t.Fatalf("no runtime target: %v", err)
	}
}

func TestAccessRefreshPlan(t *testing.T) {
	claims := base64.RawURLEncoding.EncodeToString([]byte(`{"exp":1767323045,"wid":"W"}`))
	exp, ok := accessExpiry("h." + claims + ".s")
	if !ok || exp.Unix() != 1767323045 {
		t.Fatalf("exp %v %v", exp, ok)
	}
	for _, bad := range []string{"", "opaque", "a.b", "h.!!.s", "h." + base64.RawURLEncoding.EncodeToString([]byte(`{"wid":"W"}`)) + ".s"} {
		if _, ok := accessExpiry(bad); ok {
			t.Errorf("%q read as having an expiry", bad)
		}
	}
	got := time.Unix(1767323045, 0)
	for _, life := range []time.Duration{10 * time.Second, 10 * time.Minute} {
		for _, j := range []float64{0, 0.999} {
			left := got.Add(life).Sub(refreshAt(got, got.Add(life), j))
			if left < life/3 || left > life/3+life/10+time.Millisecond {
				t.Errorf("a %s token (jitter %.3f) is refreshed %s before expiry", life, j, left)
			}
		}
	}
	if at := refreshAt(got, got.Add(-time.Minute), 0.5); at.Sub(got) < time.Second {
		t.Errorf("an expired-looking token is refreshed after %s, under the one-second floor", at.Sub(got))
	}
}
