package remote

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

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
