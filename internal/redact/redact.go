// Package redact masks secret-looking values in JSON documents and text
// before they leave a machine or a workspace: values under secret-sounding
// keys, and strings shaped like tokens, keys, passwords in URLs and private
// key blocks. It errs towards masking.
package redact

import (
	"encoding/json"
	"regexp"
	"strings"
	"sync"
)

// Mask replaces what was removed.
const Mask = "[redacted]"

// The expressions are compiled on first use: every start of the binary
// would otherwise pay for them in package init (about 700 allocations).

// secretKey matches object keys whose values are secrets.
var secretKey = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?i)(pass(word|wd|phrase)?|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|authorization|cookie|credential|session[_-]?key|signature|seed)`)
})

// secretValue matches secret-shaped substrings of any string.
var secretValue = sync.OnceValue(func() []*regexp.Regexp {
	return []*regexp.Regexp{
		regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$)`),
		regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}`),
		regexp.MustCompile(`\b(sk|pk|rk)-[A-Za-z0-9_-]{16,}`),                              // OpenAI/Anthropic/Stripe style
		regexp.MustCompile(`\b(ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{20,}`),         // GitHub
		regexp.MustCompile(`\bxox[abposr]-[A-Za-z0-9-]{10,}`),                              // Slack
		regexp.MustCompile(`\b(AKIA|ASIA)[A-Z0-9]{16}\b`),                                  // AWS access key id
		regexp.MustCompile(`\bAIza[0-9A-Za-z_-]{35}\b`),                                    // Google API key
		regexp.MustCompile(`\br[vw][a-z]_[A-Za-z0-9_.-]{16,}`),                             // reeve credentials (rv*_), runner credentials and lease tokens (rw*_)
		regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}`), // JWT
		regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@]+):[^\s@/]+@`),              // password in a URL (keeps the user)
		regexp.MustCompile(`(?i)\b(password|passwd|pwd|secret|token|api[_-]?key)\s*[=:]\s*("[^"]*"|'[^']*'|[^\s,;&]+)`),
	}
})

// String masks secret-shaped parts of s.
func String(s string) string {
	for i, re := range secretValue() {
		switch i {
		case 9: // URL password: keep scheme and user
			s = re.ReplaceAllString(s, "${1}:"+Mask+"@")
		case 10: // key=value: keep the key
			s = re.ReplaceAllString(s, "${1}="+Mask)
		default:
			s = re.ReplaceAllString(s, Mask)
		}
	}
	return s
}

// Value masks a decoded JSON value in place and returns it.
func Value(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if secretKey().MatchString(k) && e != nil && !harmless(k, e) {
				if _, isObj := e.(map[string]any); !isObj {
					x[k] = Mask
					continue
				}
			}
			x[k] = Value(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = Value(e)
		}
		return x
	case string:
		return String(x)
	}
	return v
}

// harmless reports whether a value under a secret-sounding key cannot be a
// secret: a boolean ("has_api_key": true), or a number under a key that
// counts model tokens ("input_tokens": 1200, "cache_read_input_tokens"),
// which agents' usage reports are full of and which masking would erase
// from every synced session's spend.
func harmless(key string, v any) bool {
	switch v.(type) {
	case bool:
		return true
	case float64, json.Number:
		return strings.HasSuffix(strings.ToLower(key), "tokens")
	}
	return false
}

// JSON masks a JSON document; a document that does not parse is masked as
// text.
func JSON(doc []byte) []byte {
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		return []byte(String(string(doc)))
	}
	out, err := json.Marshal(Value(v))
	if err != nil {
		return []byte(Mask)
	}
	return out
}

// SecretKey reports whether a name (a JSON key, an environment variable,
// a command-line flag without its dashes) says its value is a secret. Names
// that count model tokens (max-tokens, input_tokens) are not.
func SecretKey(name string) bool {
	return secretKey().MatchString(name) && !strings.HasSuffix(strings.ToLower(name), "tokens")
}

// Contains reports whether s has anything String would mask (for tests and
// for refusing uploads).
func Contains(s string) bool { return String(s) != s || strings.Contains(s, "PRIVATE KEY") }
