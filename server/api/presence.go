package api

import "time"

// Online reports whether a daemon of this workspace and runtime target
// (install) is connected to a relay instance that reports its presence to
// this server: the pages show machines online or offline with it.
// Presence lives in the server's memory (relaybus.go), so a replica that
// no relay reports to sees every machine offline.
func (s *Server) Online(workspace, target string) bool {
	h := s.relay
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.presence[presenceKey{workspace, target}]
	return ok && time.Now().Before(e.expires) && h.inboxes[e.p.InstanceID] != nil
}
