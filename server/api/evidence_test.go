package api_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
)

var knownSecrets = []string{
	"sk-ant-api03-KNOWNSECRETvalue0123456789abcdef",
	"ghp_KNOWNSECRET0123456789abcdefghijklmn",
	"AKIAKNOWNSECRET12345",
	"hunter2-KNOWN-password",
}

func jwksOf(t *testing.T, s *servertest.Server) sdk.JWKS {
	t.Helper()
	a := expect(t, do(t, s, "GET", "/api/.well-known/jwks.json", "", nil), 200, "jwks")
	var k sdk.JWKS
	if err := json.Unmarshal(a.Body, &k); err != nil || len(k.Keys) == 0 {
		t.Fatalf("jwks %s: %v", a.Body, err)
	}
	return k
}

func sessionWithSecrets(t *testing.T, s *servertest.Server, u servertest.User) string {
	t.Helper()
	base := "/api/resources/" + u.Workspace + "/sessions"
	sid := dataOf(expect(t, do(t, s, "POST", base, u.Token, map[string]any{"title": "deploy with " + knownSecrets[0], "source_kind": "cli", "metadata": map[string]any{"api_key": knownSecrets[2]}}), 201, "session"))["id"].(string)
	for i, body := range []string{
		"run: curl -H 'Authorization: Bearer " + knownSecrets[0] + "' https://api",
		"export GITHUB_TOKEN=" + knownSecrets[1],
		"db password=" + knownSecrets[3],
	} {
		expect(t, do(t, s, "POST", base+"/"+sid+"/collaboration-events", u.Token, map[string]any{"event_kind": "comment_created", "body_plaintext": body, "title": "step " + itoa(int64(i))}), 201, "event")
	}
	return sid
}

func TestEvidenceExportVerifyTamper(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	u := s.NewUser("ev@example.com")
	sid := sessionWithSecrets(t, s, u)
	base := "/api/resources/" + u.Workspace + "/sessions/" + sid
	keys := jwksOf(t, s)

	for _, kind := range []string{"receipt-export", "trace-export"} {
		a := expect(t, do(t, s, "GET", base+"/"+kind, u.Token, nil), 200, kind)
		b, err := sdk.VerifyEvidence(a.Body, keys)
		if err != nil {
			t.Fatalf("%s does not verify: %v", kind, err)
		}
		if len(b.Events) != 3 || b.SessionID != sid || b.ChainHead == "" {
			t.Fatalf("%s bundle: %+v", kind, b)
		}
		var env sdk.EvidenceEnvelope
		_ = json.Unmarshal(a.Body, &env)
		payload, _ := base64.RawURLEncoding.DecodeString(env.Data.Payload)
		for _, sec := range knownSecrets {
			if strings.Contains(string(payload), sec) || strings.Contains(string(a.Body), sec) {
				t.Fatalf("%s carries %s", kind, sec)
			}
		}
		if kind == "trace-export" && !strings.Contains(string(payload), "step 1") {
			t.Fatalf("trace has no payloads: %s", payload)
		}

		// Any changed byte fails: every position of the file, in turn
		// (a sample of them keeps the test quick).
		for i := 0; i < len(a.Body)-1; i += 1 + len(a.Body)/300 {
			bad := []byte(string(a.Body))
			bad[i] ^= 0x01
			if _, err := sdk.VerifyEvidence(bad, keys); err == nil {
				t.Fatalf("%s: flipping byte %d still verifies", kind, i)
			}
		}
		// Reordered events, re-encoded: the signature no longer matches.
		b.Events[0], b.Events[1] = b.Events[1], b.Events[0]
		re, _ := json.Marshal(b)
		env.Data.Payload = base64.RawURLEncoding.EncodeToString(re)
		forged, _ := json.Marshal(env)
		if _, err := sdk.VerifyEvidence(forged, keys); !errors.Is(err, sdk.ErrEvidence) {
			t.Fatalf("reordered events verify: %v", err)
		}
		// Another server's key does not verify it.
		if _, err := sdk.VerifyEvidence(a.Body, jwksOf(t, servertest.Start(t, servertest.Options{}))); !errors.Is(err, sdk.ErrEvidence) {
			t.Fatalf("wrong key verifies: %v", err)
		}
	}

	// Rotation: a new key signs, the old one stays published and its
	// bundles still verify.
	old := expect(t, do(t, s, "GET", base+"/receipt-export", u.Token, nil), 200, "before rotation")
	kid, err := s.Host.RotateEvidenceKey(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	keys = jwksOf(t, s)
	if len(keys.Keys) != 2 || keys.Keys[0].Kid != kid || keys.Keys[0].Status != "current" || keys.Keys[1].Status != "retired" {
		t.Fatalf("keys after rotation %+v", keys)
	}
	if _, err := sdk.VerifyEvidence(old.Body, keys); err != nil {
		t.Fatalf("old bundle after rotation: %v", err)
	}
	fresh := expect(t, do(t, s, "GET", base+"/receipt-export", u.Token, nil), 200, "after rotation")
	if !strings.Contains(string(fresh.Body), kid) {
		t.Fatalf("not signed by the new key: %s", fresh.Body)
	}
	if _, err := sdk.VerifyEvidence(fresh.Body, sdk.JWKS{Keys: keys.Keys[1:]}); err == nil {
		t.Fatal("a new bundle verifies with the retired key alone")
	}
}

func TestComputeEvidenceAndSupportDebugAreRedacted(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	u := s.NewUser("red@example.com")
	sid := sessionWithSecrets(t, s, u)
	for _, p := range []string{"/api/resources/" + u.Workspace + "/sessions/" + sid, "/api/sessions/" + sid} {
		for _, kind := range []string{"compute-evidence", "support-debug"} {
			if strings.HasPrefix(p, "/api/sessions/") && kind == "support-debug" {
				continue // the placeholder group has no support-debug
			}
			a := expect(t, do(t, s, "GET", p+"/"+kind, u.Token, nil, "X-Reeve-Workspace", u.Workspace), 200, kind)
			for _, sec := range knownSecrets {
				if strings.Contains(string(a.Body), sec) {
					t.Fatalf("%s %s shows %s: %s", p, kind, sec, a.Body)
				}
			}
			if !strings.Contains(string(a.Body), "[redacted]") || !strings.Contains(string(a.Body), "step 2") {
				t.Fatalf("%s: nothing of the events is shown: %s", kind, a.Body)
			}
		}
	}
}
