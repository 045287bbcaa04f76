package api

import (
	"context"
	"time"
)

// Online reports whether a daemon of this workspace and runtime target
// (install) is connected to a live relay instance: the pages show machines
// online or offline with it. On PostgreSQL it reads the presence every
// replica shares, so the answer does not depend on which replica renders
// the page; on SQLite the one server's memory. A presence that cannot be
// read answers offline.
func (s *Server) Online(workspace, target string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	p, err := s.relay.state.resolve(ctx, workspace, target, s.opts.Now())
	if err != nil {
		s.log.Warn("read relay presence", "err", err)
		return false
	}
	return p != nil
}
