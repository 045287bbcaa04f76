package redact

import (
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
