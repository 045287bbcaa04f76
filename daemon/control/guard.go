package control

import (
	"crypto/subtle"
	"net"
	"net/http"
	"strings"

	"reeve.dev/reeve/daemon/wire"
)

// guard protects the local API. A browser page on any site can make requests
// to 127.0.0.1, so the Host header (DNS rebinding) and the Origin header
// (cross-site requests) are checked before anything else, then the token.
type guard struct {
	allowedHosts   []string
	allowedOrigins []string
	boundPort      string // "" for a unix socket
	token          []byte // nil: no token auth
}

func (g *guard) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.hostAllowed(r.Host) {
			writeError(w, http.StatusForbidden, wire.CodeForbiddenHost,
				"host "+quote(r.Host)+" is not allowed: use a loopback address or start the daemon with --allowed-hosts")
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" {
			if !g.originAllowed(origin) {
				writeError(w, http.StatusForbidden, wire.CodeForbiddenOrigin,
					"origin "+quote(origin)+" is not allowed: start the daemon with --allowed-origins to permit it")
				return
			}
			// An allowed origin is a page the user trusts to drive the
			// daemon: let the browser hand it the responses.
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", origin)
			h.Add("Vary", "Origin")
			if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
				// A preflight carries no credentials; it only asks what the
				// real request may do, which still needs the token.
				h.Set("Access-Control-Allow-Methods", "GET, POST, DELETE")
				h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type")
				h.Set("Access-Control-Max-Age", "600")
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		if g.token != nil && r.URL.Path != "/health" && !g.tokenValid(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="reeve"`)
			writeError(w, http.StatusUnauthorized, wire.CodeUnauthorized,
				"a valid bearer token is required (the daemon was started with --auth; the token is in the daemon home)")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hostAllowed accepts a loopback name for the bound port, or any entry of
// --allowed-hosts given as "host" or "host:port".
func (g *guard) hostAllowed(hostHeader string) bool {
	if hostHeader == "" {
		return false
	}
	host, port := splitHost(hostHeader)
	for _, a := range g.allowedHosts {
		if strings.EqualFold(a, hostHeader) || strings.EqualFold(a, host) {
			return true
		}
	}
	if !isLoopbackName(host) {
		return false
	}
	if g.boundPort == "" {
		// A unix socket cannot be reached by a browser; any loopback name is fine.
		return true
	}
	if port == "" {
		port = "80"
	}
	return port == g.boundPort
}

func (g *guard) originAllowed(origin string) bool {
	origin = strings.TrimSuffix(origin, "/")
	for _, a := range g.allowedOrigins {
		if a == "*" || strings.EqualFold(strings.TrimSuffix(a, "/"), origin) {
			return true
		}
	}
	return false
}

func (g *guard) tokenValid(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	const prefix = "Bearer "
	if len(h) <= len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(h[len(prefix):])), g.token) == 1
}

// splitHost splits a Host header into host and optional port, accepting
// bracketed IPv6 literals.
func splitHost(hostHeader string) (host, port string) {
	if h, p, err := net.SplitHostPort(hostHeader); err == nil {
		return h, p
	}
	return strings.Trim(hostHeader, "[]"), ""
}

// isLoopbackName reports whether host names this machine's loopback
// interface: "localhost" or a loopback IP literal.
func isLoopbackName(host string) bool {
	if strings.EqualFold(host, "localhost") || strings.EqualFold(host, "localhost.") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func quote(s string) string {
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return "\"" + strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s) + "\""
}
