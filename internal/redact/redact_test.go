package redact

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestKnownSecretsAreMasked(t *testing.T) {
	secrets := []string{
		"sk-ant-api03-abcdefghijklmnopqrstuvwxyz012345",
		"ghp_abcdefghijklmnopqrstuvwxyz0123456789",
		"xoxb-123456789012-abcdefghijkl",
		"AKIAIOSFODNN7EXAMPLE",
		"AIzaSyA1234567890abcdefghijklmnopqrstuv",
		"rvp_0123456789abcdefghijklmnop",
		"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
		"hunter2-very-secret",
	}
	doc := `{"cmd":"curl -H 'Authorization: Bearer ` + secrets[0] + `' https://x","env":{"GITHUB_TOKEN":"` + secrets[1] + `","note":"slack ` + secrets[2] + ` aws ` + secrets[3] + `"},` +
		`"args":["--key=` + secrets[4] + `","` + secrets[5] + `"],"jwt":"x ` + secrets[6] + `","password":"` + secrets[7] + `","url":"postgres://app:` + secrets[7] + `@db/x",` +
		`"pem":"-----BEGIN RSA PRIVATE KEY-----\nMIIabc\n-----END RSA PRIVATE KEY-----","ok":"plain text stays","n":3}`
	out := string(JSON([]byte(doc)))
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("%s survived: %s", s, out)
		}
	}
	for _, keep := range []string{"plain text stays", "postgres://app:", `"n":3`, "curl"} {
		if !strings.Contains(out, keep) {
			t.Errorf("%q was lost: %s", keep, out)
		}
	}
	if strings.Contains(out, "MIIabc") {
		t.Errorf("PEM body survived")
	}
}

// Usage counts under "…tokens" keys and booleans are kept; a string or a
// number under any other secret-sounding key is still masked.
func TestTokenCountsAreNotSecrets(t *testing.T) {
	in := `{"usage":{"input_tokens":1200,"cache_read_input_tokens":7,"max_tokens":64},"has_api_key":true,` +
		`"tokens":"abc","api_key":12345678,"password":"hunter2","access_token":99}`
	var got map[string]any
	if err := json.Unmarshal(JSON([]byte(in)), &got); err != nil {
		t.Fatal(err)
	}
	usage := got["usage"].(map[string]any)
	for _, k := range []string{"input_tokens", "cache_read_input_tokens", "max_tokens"} {
		if _, ok := usage[k].(float64); !ok {
			t.Errorf("usage.%s = %v, want the count kept", k, usage[k])
		}
	}
	if got["has_api_key"] != true {
		t.Errorf("has_api_key = %v, want true kept", got["has_api_key"])
	}
	for _, k := range []string{"tokens", "api_key", "password", "access_token"} {
		if got[k] != Mask {
			t.Errorf("%s = %v, want %q", k, got[k], Mask)
		}
	}
}
