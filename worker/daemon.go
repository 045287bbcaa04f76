package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"reeve.dev/reeve/daemon/controlclient"
	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/daemon/wireclient"
)

// Daemon is what a worker asks of the local daemon: the same runtime as
// `reeve run` (registered directories, governed sessions in worktrees,
// their event logs and permission requests).
type Daemon interface {
	Health(ctx context.Context) (wire.Health, error)
	AddDirectory(ctx context.Context, path string) (wire.AddDirectoryResponse, error)
	Launch(ctx context.Context, req wire.LaunchRequest) (wire.SessionInfo, error)
	// Follow streams a session's events from after seq 0 to its end.
	Follow(ctx context.Context, sessionID string) (Stream, error)
	RespondPermission(ctx context.Context, req wire.RespondPermissionRequest) error
	Kill(ctx context.Context, sessionID string) error
	WorktreeSummary(ctx context.Context, sessionID string) (wire.WorktreeSummary, error)
	Close() error
}

// Stream is a followed session (a *wireclient.Subscription).
type Stream interface {
	Updates() <-chan wireclient.Update
	Ended() *wire.SessionEnded
	Err() error
}

var _ Stream = (*wireclient.Subscription)(nil)

// LocalDaemon reaches the daemon running from a home: its REST routes
// and its control protocol, which reconnects across a worker restart of
// the daemon.
type LocalDaemon struct {
	rest *controlclient.Client
	conn *wireclient.Conn
}

var _ Daemon = (*LocalDaemon)(nil)

// DialDaemon connects to the daemon of dir.
func DialDaemon(ctx context.Context, dir home.Dir) (*LocalDaemon, error) {
	if locked, err := dir.Locked(); err == nil && !locked {
		return nil, fmt.Errorf("%w from %s: start it with `reeve start`", controlclient.ErrNoDaemon, dir)
	}
	rest, _, err := controlclient.FromHome(dir, 30*time.Second)
	if err != nil {
		return nil, fmt.Errorf("reach the daemon: %w", err)
	}
	conn, err := controlclient.DialHome(ctx, dir, controlclient.ConnOptions{Reconnect: true, ReconnectFor: 2 * time.Minute, RequestTimeout: 60 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open the daemon's control protocol: %w", err)
	}
	return &LocalDaemon{rest: rest, conn: conn}, nil
}

func (d *LocalDaemon) Health(ctx context.Context) (wire.Health, error) { return d.rest.Health(ctx) }

func (d *LocalDaemon) AddDirectory(ctx context.Context, path string) (wire.AddDirectoryResponse, error) {
	return d.rest.AddDirectory(ctx, path)
}

func (d *LocalDaemon) Launch(ctx context.Context, req wire.LaunchRequest) (wire.SessionInfo, error) {
	return d.conn.Launch(ctx, req)
}

func (d *LocalDaemon) Follow(ctx context.Context, sessionID string) (Stream, error) {
	return d.conn.Subscribe(ctx, sessionID, 0)
}

func (d *LocalDaemon) RespondPermission(ctx context.Context, req wire.RespondPermissionRequest) error {
	_, err := d.conn.RespondPermission(ctx, req)
	return err
}

func (d *LocalDaemon) Kill(ctx context.Context, sessionID string) error {
	return d.conn.Kill(ctx, wire.KillRequest{SessionID: sessionID})
}

func (d *LocalDaemon) WorktreeSummary(ctx context.Context, sessionID string) (wire.WorktreeSummary, error) {
	return d.conn.WorktreeSummary(ctx, wire.WorktreeSummaryRequest{SessionID: sessionID})
}

func (d *LocalDaemon) Close() error { return d.conn.Close() }

// ErrAgents means the daemon lacks agents the worker was asked to offer.
var ErrAgents = errors.New("the daemon has not loaded every agent asked for")

// CheckAgents compares the agents a worker offers with the adapters the
// daemon loaded. It returns the offered list (the daemon's, when want is
// empty) or ErrAgents naming the missing ones.
func CheckAgents(h wire.Health, want []string) ([]string, error) {
	if len(want) == 0 {
		return h.Agents, nil
	}
	loaded := map[string]bool{}
	for _, a := range h.Agents {
		loaded[a] = true
	}
	var missing []string
	for _, a := range want {
		if !loaded[a] {
			missing = append(missing, a)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: missing %v (loaded: %v)", ErrAgents, missing, h.Agents)
	}
	return want, nil
}
