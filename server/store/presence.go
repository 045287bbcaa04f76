package store

import (
	"context"
	"fmt"
	"time"
)

// RelayPresence says which relay instance holds the daemon connection of a
// runtime target, until ExpiresAt unless reported again.
type RelayPresence struct {
	WorkspaceID     string
	RuntimeTargetID string
	InstanceID      string
	ConnID          string
	ConnectedAt     time.Time
	ExpiresAt       time.Time
}

// PresenceReport is what ReportPresence did with a report.
type PresenceReport struct {
	// Accepted counts the entries now advertised.
	Accepted int
	// Superseded lists reported entries that a newer connection of the
	// same runtime target holds: their instance should drop them.
	Superseded []RelayPresence
	// Replaced lists live entries of other instances that a newer
	// reported connection replaced: those instances should drop them.
	Replaced []RelayPresence
}

// ReportPresence records the daemon connections instance holds (entries,
// advertised until expires) and those it lost (removed), and marks the
// instance seen. Per runtime target the newest connection wins, wherever
// it is: an entry older than the live one is superseded, a newer one
// replaces it.
func (s *DB) ReportPresence(ctx context.Context, instance string, entries, removed []RelayPresence, expires, now time.Time) (PresenceReport, error) {
	var rep PresenceReport
	err := s.exec(ctx, func(tx *Tx) error {
		rep = PresenceReport{}
		if _, err := tx.Exec(`INSERT INTO relay_instances (instance_id, seen_at) VALUES (?,?)
			ON CONFLICT (instance_id) DO UPDATE SET seen_at = excluded.seen_at WHERE relay_instances.seen_at < excluded.seen_at`, instance, now.UnixNano()); err != nil {
			return err
		}
		for _, e := range removed {
			if _, err := tx.Exec(`DELETE FROM relay_presence WHERE workspace_id = ? AND runtime_target_id = ? AND instance_id = ? AND conn_id = ?`,
				e.WorkspaceID, e.RuntimeTargetID, instance, e.ConnID); err != nil {
				return err
			}
		}
		for _, e := range entries {
			e.InstanceID = instance
			cur, found, err := presenceRow(tx.QueryRow(`SELECT workspace_id, runtime_target_id, instance_id, conn_id, connected_at, expires_at
				FROM relay_presence WHERE workspace_id = ? AND runtime_target_id = ?`, e.WorkspaceID, e.RuntimeTargetID))
			if err != nil {
				return err
			}
			live := found && now.Before(cur.ExpiresAt) && cur.ConnID != e.ConnID
			if live && e.ConnectedAt.Before(cur.ConnectedAt) {
				rep.Superseded = append(rep.Superseded, e)
				continue
			}
			if live && cur.InstanceID != instance {
				rep.Replaced = append(rep.Replaced, cur)
			}
			if _, err := tx.Exec(`INSERT INTO relay_presence (workspace_id, runtime_target_id, instance_id, conn_id, connected_at, expires_at) VALUES (?,?,?,?,?,?)
				ON CONFLICT (workspace_id, runtime_target_id) DO UPDATE SET instance_id = excluded.instance_id, conn_id = excluded.conn_id,
				connected_at = excluded.connected_at, expires_at = excluded.expires_at`,
				e.WorkspaceID, e.RuntimeTargetID, instance, e.ConnID, e.ConnectedAt.UnixNano(), expires.UnixNano()); err != nil {
				return err
			}
			rep.Accepted++
		}
		return nil
	})
	if err != nil {
		return PresenceReport{}, fmt.Errorf("report relay presence: %w", err)
	}
	return rep, nil
}

// ResolvePresence returns the live daemon connection of a runtime target:
// unexpired at now, on an instance seen since aliveSince.
func (s *DB) ResolvePresence(ctx context.Context, workspace, target string, now, aliveSince time.Time) (RelayPresence, bool, error) {
	p, found, err := presenceRow(s.queryRow(ctx, `SELECT p.workspace_id, p.runtime_target_id, p.instance_id, p.conn_id, p.connected_at, p.expires_at
		FROM relay_presence p JOIN relay_instances i ON i.instance_id = p.instance_id
		WHERE p.workspace_id = ? AND p.runtime_target_id = ? AND p.expires_at > ? AND i.seen_at >= ?`,
		workspace, target, now.UnixNano(), aliveSince.UnixNano()))
	if err != nil {
		return RelayPresence{}, false, fmt.Errorf("resolve relay presence: %w", unavailable(err))
	}
	return p, found, nil
}

func presenceRow(row scanner) (RelayPresence, bool, error) {
	var (
		p        RelayPresence
		at, exps int64
	)
	err := row.Scan(&p.WorkspaceID, &p.RuntimeTargetID, &p.InstanceID, &p.ConnID, &at, &exps)
	if isNoRows(err) {
		return RelayPresence{}, false, nil
	}
	if err != nil {
		return RelayPresence{}, false, err
	}
	p.ConnectedAt, p.ExpiresAt = time.Unix(0, at), time.Unix(0, exps)
	return p, true, nil
}
