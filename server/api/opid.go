package api

import (
	"strings"
	"unicode"
)

// OperationID applies the spec 4.0 rule for operations the spec does not
// name: the lowercase method, then "Api", then each path segment after
// "/api" with its first letter upper-cased, hyphens (and dots) removed with
// the next letter upper-cased, and braces dropped.
//
//	POST /api/sessions/{agentSession}/access-requests → postApiSessionsAgentSessionAccessRequests
func OperationID(method, path string) string {
	var b strings.Builder
	b.WriteString(strings.ToLower(method))
	b.WriteString("Api")
	rest := strings.TrimPrefix(path, "/api")
	for _, seg := range strings.Split(rest, "/") {
		seg = strings.Trim(seg, "{}")
		seg = strings.TrimSuffix(seg, "...")
		upper := true
		for _, r := range seg {
			if r == '-' || r == '.' || r == '_' {
				upper = true
				continue
			}
			if upper {
				r = unicode.ToUpper(r)
				upper = false
			}
			b.WriteRune(r)
		}
	}
	return b.String()
}
