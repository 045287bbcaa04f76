package control

import (
	"net"
	"net/http"

	"reeve.dev/reeve/daemon/wire"
)

// Remote is the relay link's remote-control lock, as the local routes see
// it.
type Remote interface {
	// Unlock lets remote clients in for ttlSeconds (0 is the default;
	// others are clamped to 300..3600).
	Unlock(ttlSeconds int) wire.RemoteStatus
	Status() wire.RemoteStatus
}

// registerRemote adds GET /api/remote and POST /api/remote/unlock.
//
// Unlocking is an act on the machine itself: the routes answer only
// callers on the loopback interface or the unix socket, and never a browser
// page (a request with an Origin), even one on --allowed-origins or with the
// token, so that neither a LAN peer (profile lan) nor a web page can open
// the machine to remote control.
func (a *API) registerRemote(r Remote) {
	a.mux.HandleFunc("/api/remote", methods{http.MethodGet: localOnly(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, r.Status())
	})}.serve)
	a.mux.HandleFunc("/api/remote/unlock", methods{http.MethodPost: localOnly(func(w http.ResponseWriter, req *http.Request) {
		var body wire.UnlockRequest
		if req.ContentLength != 0 {
			if err := decodeBody(w, req, &body); err != nil {
				writeError(w, http.StatusBadRequest, wire.CodeInvalid, err.Error())
				return
			}
		}
		if body.TTLSeconds < 0 {
			writeError(w, http.StatusUnprocessableEntity, wire.CodeInvalid, "ttl_seconds must not be negative")
			return
		}
		writeJSON(w, http.StatusOK, r.Unlock(body.TTLSeconds))
	})}.serve)
}

func localOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Origin") != "" {
			writeError(w, http.StatusForbidden, wire.CodeForbiddenOrigin, "remote control is unlocked from the machine's command line (reeve pair unlock), not from a web page")
			return
		}
		if !localPeer(r.RemoteAddr) {
			writeError(w, http.StatusForbidden, wire.CodeForbiddenHost, "remote control is unlocked only by a caller on this machine")
			return
		}
		h(w, r)
	}
}

// localPeer reports whether the connection comes from this machine: a
// loopback address, or a unix socket (whose peer address is empty or "@").
func localPeer(remoteAddr string) bool {
	if remoteAddr == "" || remoteAddr == "@" {
		return true
	}
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
