package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// The SQL of the context vault: portable (placeholders "?", ON CONFLICT,
// RETURNING), so it runs unchanged on SQLite and PostgreSQL.

var _ ContextVaults = (*DB)(nil)

const cvSourceCols = `id, workspace_id, kind, name, description, use_when, update_when, repo_url, provider, branch, head_commit, sync_state, epoch, head_seq, rotation_requested_at, state, created_by, created_at, updated_at`

func scanCVSource(sc scanner) (ContextSource, error) {
	var s ContextSource
	var rot sql.NullString
	var c, u string
	err := sc.Scan(&s.ID, &s.WorkspaceID, &s.Kind, &s.Name, &s.Description, &s.UseWhen, &s.UpdateWhen, &s.RepoURL, &s.Provider, &s.Branch, &s.HeadCommit, &s.SyncState, &s.Epoch, &s.HeadSeq, &rot, &s.State, &s.CreatedBy, &c, &u)
	if err != nil {
		return ContextSource{}, err
	}
	s.RotationRequestedAt, s.CreatedAt, s.UpdatedAt = nullTS(rot), parseTS(c), parseTS(u)
	return s, nil
}

func (s *DB) CreateContextSource(ctx context.Context, src ContextSource, owner int64, audit AuditEntry) error {
	return s.exec(ctx, func(tx *Tx) error {
		var n int
		if err := tx.QueryRow(`SELECT count(*) FROM cv_sources WHERE workspace_id = ? AND name = ?`, src.WorkspaceID, src.Name).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("a context source named %q exists: %w", src.Name, ErrConflict)
		}
		_, err := tx.Exec(`INSERT INTO cv_sources (`+cvSourceCols+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
			src.ID, src.WorkspaceID, src.Kind, src.Name, src.Description, src.UseWhen, src.UpdateWhen, src.RepoURL, src.Provider, src.Branch, src.HeadCommit, src.SyncState,
			src.Epoch, src.HeadSeq, tsOrNil(src.RotationRequestedAt), src.State, src.CreatedBy, ts(src.CreatedAt), ts(src.UpdatedAt))
		if isUniqueViolation(err) {
			return fmt.Errorf("a context source named %q exists: %w", src.Name, ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("create context source: %w", err)
		}
		if _, err := tx.Exec(`INSERT INTO cv_members (source_id, user_id, role, state, added_by, added_at) VALUES (?,?,?,?,?,?)`,
			src.ID, owner, "owner", "active", src.CreatedBy, ts(src.CreatedAt)); err != nil {
			return fmt.Errorf("create context source owner: %w", err)
		}
		return insertAudit(tx, audit)
	})
}

func (s *DB) ContextSource(ctx context.Context, workspaceID, id string) (ContextSource, error) {
	src, err := scanCVSource(s.queryRow(ctx, `SELECT `+cvSourceCols+` FROM cv_sources WHERE workspace_id = ? AND id = ?`, workspaceID, id))
	return src, notFound(err)
}

func (s *DB) ContextSourceByName(ctx context.Context, workspaceID, name string) (ContextSource, error) {
	src, err := scanCVSource(s.queryRow(ctx, `SELECT `+cvSourceCols+` FROM cv_sources WHERE workspace_id = ? AND name = ?`, workspaceID, name))
	return src, notFound(err)
}

func (s *DB) ContextSources(ctx context.Context, workspaceID string) ([]ContextSource, error) {
	rows, err := s.query(ctx, `SELECT `+cvSourceCols+` FROM cv_sources WHERE workspace_id = ? ORDER BY id`, workspaceID)
	if err != nil {
		return nil, fmt.Errorf("list context sources: %w", err)
	}
	return collect(rows, scanCVSource)
}

func (s *DB) UpdateContextSource(ctx context.Context, workspaceID, id string, fn func(*ContextSource) error, audit AuditEntry) (ContextSource, error) {
	var out ContextSource
	err := s.exec(ctx, func(tx *Tx) error {
		src, err := scanCVSource(tx.QueryRow(`SELECT `+cvSourceCols+` FROM cv_sources WHERE workspace_id = ? AND id = ?`, workspaceID, id))
		if err != nil {
			return notFound(err)
		}
		if err := fn(&src); err != nil {
			return err
		}
		if src.Name != "" {
			var n int
			if err := tx.QueryRow(`SELECT count(*) FROM cv_sources WHERE workspace_id = ? AND name = ? AND id != ?`, workspaceID, src.Name, id).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return fmt.Errorf("a context source named %q exists: %w", src.Name, ErrConflict)
			}
		}
		_, err = tx.Exec(`UPDATE cv_sources SET name = ?, description = ?, use_when = ?, update_when = ?, repo_url = ?, provider = ?, branch = ?, head_commit = ?, sync_state = ?, rotation_requested_at = ?, state = ?, updated_at = ? WHERE id = ?`,
			src.Name, src.Description, src.UseWhen, src.UpdateWhen, src.RepoURL, src.Provider, src.Branch, src.HeadCommit, src.SyncState, tsOrNil(src.RotationRequestedAt), src.State, ts(src.UpdatedAt), id)
		if err != nil {
			return fmt.Errorf("update context source: %w", err)
		}
		out = src
		return insertAudit(tx, audit)
	})
	return out, err
}

// ---- members ----

func scanCVMember(sc scanner) (ContextMember, error) {
	var m ContextMember
	var a string
	var r sql.NullString
	if err := sc.Scan(&m.SourceID, &m.UserID, &m.Role, &m.State, &m.AddedBy, &a, &r); err != nil {
		return ContextMember{}, err
	}
	m.AddedAt, m.RemovedAt = parseTS(a), nullTS(r)
	return m, nil
}

func (s *DB) ContextMembers(ctx context.Context, sourceID string) ([]ContextMember, error) {
	rows, err := s.query(ctx, `SELECT source_id, user_id, role, state, added_by, added_at, removed_at FROM cv_members WHERE source_id = ? ORDER BY user_id`, sourceID)
	if err != nil {
		return nil, fmt.Errorf("list context members: %w", err)
	}
	return collect(rows, scanCVMember)
}

func (s *DB) PutContextMember(ctx context.Context, m ContextMember, audit AuditEntry) error {
	return s.exec(ctx, func(tx *Tx) error {
		_, err := tx.Exec(`INSERT INTO cv_members (source_id, user_id, role, state, added_by, added_at, removed_at) VALUES (?,?,?,?,?,?,NULL)
			ON CONFLICT (source_id, user_id) DO UPDATE SET role = excluded.role, state = excluded.state, added_by = excluded.added_by, added_at = excluded.added_at, removed_at = NULL`,
			m.SourceID, m.UserID, m.Role, "active", m.AddedBy, ts(m.AddedAt))
		if err != nil {
			return fmt.Errorf("put context member: %w", err)
		}
		return insertAudit(tx, audit)
	})
}

func (s *DB) RemoveContextMember(ctx context.Context, workspaceID, sourceID string, userID int64, rev ContextRevocation, audit AuditEntry) error {
	return s.exec(ctx, func(tx *Tx) error {
		var role string
		if err := tx.QueryRow(`SELECT role FROM cv_members WHERE source_id = ? AND user_id = ? AND state = 'active'`, sourceID, userID).Scan(&role); err != nil {
			return notFound(err)
		}
		if role == "owner" {
			var n int
			if err := tx.QueryRow(`SELECT count(*) FROM cv_members WHERE source_id = ? AND role = 'owner' AND state = 'active' AND user_id != ?`, sourceID, userID).Scan(&n); err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("the last owner of a vault cannot be removed: %w", ErrConflict)
			}
		}
		if _, err := tx.Exec(`UPDATE cv_members SET state = 'removed', removed_at = ? WHERE source_id = ? AND user_id = ?`, ts(rev.RevokedAt), sourceID, userID); err != nil {
			return err
		}
		if err := insertCVRevocation(tx, rev); err != nil {
			return err
		}
		return insertAudit(tx, audit)
	})
}

func insertCVRevocation(tx *Tx, r ContextRevocation) error {
	if r.ID == "" {
		r.ID = newID()
	}
	_, err := tx.Exec(`INSERT INTO cv_revocations (id, workspace_id, source_id, kind, device_id, user_id, revoked_by, revoked_at) VALUES (?,?,?,?,?,?,?,?)`,
		r.ID, r.WorkspaceID, r.SourceID, r.Kind, r.DeviceID, r.UserID, r.RevokedBy, ts(r.RevokedAt))
	if err != nil {
		return fmt.Errorf("record revocation: %w", err)
	}
	return nil
}

// ---- devices ----

const cvDeviceCols = `id, workspace_id, user_id, install_id, name, recipient, signing_key, fingerprint, state, approved_by, created_at, updated_at, revoked_at`

func scanCVDevice(sc scanner) (ContextDevice, error) {
	var d ContextDevice
	var c, u string
	var r sql.NullString
	if err := sc.Scan(&d.ID, &d.WorkspaceID, &d.UserID, &d.InstallID, &d.Name, &d.Recipient, &d.SigningKey, &d.Fingerprint, &d.State, &d.ApprovedBy, &c, &u, &r); err != nil {
		return ContextDevice{}, err
	}
	d.CreatedAt, d.UpdatedAt, d.RevokedAt = parseTS(c), parseTS(u), nullTS(r)
	return d, nil
}

func (s *DB) CreateContextDevice(ctx context.Context, d *ContextDevice, audit AuditEntry) error {
	if d.ID == "" {
		d.ID = newID()
	}
	return s.exec(ctx, func(tx *Tx) error {
		var n int
		if err := tx.QueryRow(`SELECT count(*) FROM cv_devices WHERE workspace_id = ? AND recipient = ?`, d.WorkspaceID, d.Recipient).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("this device key is already enrolled: %w", ErrConflict)
		}
		if err := tx.QueryRow(`SELECT count(*) FROM cv_devices WHERE workspace_id = ? AND install_id = ? AND state != 'revoked'`, d.WorkspaceID, d.InstallID).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("this machine already has a device: %w", ErrConflict)
		}
		if d.State == "" {
			// The first device of a user has nobody to vouch for it.
			if err := tx.QueryRow(`SELECT count(*) FROM cv_devices WHERE workspace_id = ? AND user_id = ? AND state IN ('approved', 'active')`, d.WorkspaceID, d.UserID).Scan(&n); err != nil {
				return err
			}
			d.State = "pending"
			if n == 0 {
				d.State = "active"
			}
		}
		_, err := tx.Exec(`INSERT INTO cv_devices (`+cvDeviceCols+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)`,
			d.ID, d.WorkspaceID, d.UserID, d.InstallID, d.Name, d.Recipient, d.SigningKey, d.Fingerprint, d.State, d.ApprovedBy, ts(d.CreatedAt), ts(d.UpdatedAt), tsOrNil(d.RevokedAt))
		if isUniqueViolation(err) {
			return fmt.Errorf("this device key is already enrolled: %w", ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("create context device: %w", err)
		}
		audit.Detail, _ = json.Marshal(map[string]string{"device_id": d.ID, "state": d.State, "fingerprint": d.Fingerprint})
		return insertAudit(tx, audit)
	})
}

func (s *DB) ContextDevice(ctx context.Context, workspaceID, id string) (ContextDevice, error) {
	d, err := scanCVDevice(s.queryRow(ctx, `SELECT `+cvDeviceCols+` FROM cv_devices WHERE workspace_id = ? AND id = ?`, workspaceID, id))
	return d, notFound(err)
}

func (s *DB) ContextDeviceByInstall(ctx context.Context, workspaceID, installID string) (ContextDevice, error) {
	d, err := scanCVDevice(s.queryRow(ctx, `SELECT `+cvDeviceCols+` FROM cv_devices WHERE workspace_id = ? AND install_id = ? AND state != 'revoked'`, workspaceID, installID))
	return d, notFound(err)
}

func (s *DB) ContextDeviceByRecipient(ctx context.Context, workspaceID, recipient string) (ContextDevice, error) {
	d, err := scanCVDevice(s.queryRow(ctx, `SELECT `+cvDeviceCols+` FROM cv_devices WHERE workspace_id = ? AND recipient = ?`, workspaceID, recipient))
	return d, notFound(err)
}

func (s *DB) ContextDevices(ctx context.Context, workspaceID string) ([]ContextDevice, error) {
	rows, err := s.query(ctx, `SELECT `+cvDeviceCols+` FROM cv_devices WHERE workspace_id = ? ORDER BY id`, workspaceID)
	if err != nil {
		return nil, fmt.Errorf("list context devices: %w", err)
	}
	return collect(rows, scanCVDevice)
}

func (s *DB) UpdateContextDevice(ctx context.Context, workspaceID, id string, fn func(*ContextDevice) error, keys []ContextKey, audit AuditEntry) (ContextDevice, error) {
	var out ContextDevice
	err := s.exec(ctx, func(tx *Tx) error {
		d, err := scanCVDevice(tx.QueryRow(`SELECT `+cvDeviceCols+` FROM cv_devices WHERE workspace_id = ? AND id = ?`, workspaceID, id))
		if err != nil {
			return notFound(err)
		}
		if err := fn(&d); err != nil {
			return err
		}
		if _, err := tx.Exec(`UPDATE cv_devices SET name = ?, install_id = ?, state = ?, approved_by = ?, updated_at = ?, revoked_at = ? WHERE id = ?`,
			d.Name, d.InstallID, d.State, d.ApprovedBy, ts(d.UpdatedAt), tsOrNil(d.RevokedAt), id); err != nil {
			return fmt.Errorf("update context device: %w", err)
		}
		if _, err := insertCVKeys(tx, keys); err != nil {
			return err
		}
		out = d
		return insertAudit(tx, audit)
	})
	return out, err
}

func (s *DB) RevokeContextDevice(ctx context.Context, workspaceID, id string, rev ContextRevocation, audit AuditEntry) error {
	return s.exec(ctx, func(tx *Tx) error {
		res, err := tx.Exec(`UPDATE cv_devices SET state = 'revoked', revoked_at = ?, updated_at = ? WHERE workspace_id = ? AND id = ? AND state != 'revoked'`, ts(rev.RevokedAt), ts(rev.RevokedAt), workspaceID, id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrNotFound
		}
		if err := insertCVRevocation(tx, rev); err != nil {
			return err
		}
		return insertAudit(tx, audit)
	})
}

func (s *DB) RebindContextDevice(ctx context.Context, workspaceID, deviceID, installID string, audit AuditEntry) (ContextDevice, error) {
	var out ContextDevice
	err := s.exec(ctx, func(tx *Tx) error {
		var n int
		if err := tx.QueryRow(`SELECT count(*) FROM cv_devices WHERE workspace_id = ? AND install_id = ? AND state != 'revoked' AND id != ?`, workspaceID, installID, deviceID).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return fmt.Errorf("this machine already has another device: %w", ErrConflict)
		}
		res, err := tx.Exec(`UPDATE cv_devices SET install_id = ?, updated_at = ? WHERE workspace_id = ? AND id = ? AND state != 'revoked'`, installID, ts(time.Now()), workspaceID, deviceID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrNotFound
		}
		d, err := scanCVDevice(tx.QueryRow(`SELECT `+cvDeviceCols+` FROM cv_devices WHERE id = ?`, deviceID))
		if err != nil {
			return err
		}
		out = d
		return insertAudit(tx, audit)
	})
	return out, err
}

// ---- keys and eligibility ----

const cvKeyCols = `source_id, epoch, device_id, wrapped, wrapped_by, state, created_at, materialized_at`

func scanCVKey(sc scanner) (ContextKey, error) {
	var k ContextKey
	var c string
	var m sql.NullString
	if err := sc.Scan(&k.SourceID, &k.Epoch, &k.DeviceID, &k.Wrapped, &k.WrappedBy, &k.State, &c, &m); err != nil {
		return ContextKey{}, err
	}
	k.CreatedAt, k.MaterializedAt = parseTS(c), nullTS(m)
	return k, nil
}

// insertCVKeys adds wraps that are not there yet and returns those added.
func insertCVKeys(tx *Tx, keys []ContextKey) ([]ContextKey, error) {
	var added []ContextKey
	for _, k := range keys {
		res, err := tx.Exec(`INSERT INTO cv_keys (`+cvKeyCols+`) VALUES (?,?,?,?,?,?,?,NULL) ON CONFLICT (source_id, epoch, device_id) DO NOTHING`,
			k.SourceID, k.Epoch, k.DeviceID, k.Wrapped, k.WrappedBy, "emitted", ts(k.CreatedAt))
		if err != nil {
			return nil, fmt.Errorf("store wrapped key: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			k.State = "emitted"
			added = append(added, k)
		}
	}
	return added, nil
}

func (s *DB) ContextKeysOf(ctx context.Context, workspaceID, deviceID string) ([]ContextKey, error) {
	rows, err := s.query(ctx, `SELECT k.source_id, k.epoch, k.device_id, k.wrapped, k.wrapped_by, k.state, k.created_at, k.materialized_at
		FROM cv_keys k JOIN cv_sources s ON s.id = k.source_id WHERE s.workspace_id = ? AND k.device_id = ? ORDER BY k.source_id, k.epoch`, workspaceID, deviceID)
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	return collect(rows, scanCVKey)
}

// eligibleSQL selects the devices eligible for source ? of workspace ?.
const eligibleSQL = `SELECT d.id, d.workspace_id, d.user_id, d.install_id, d.name, d.recipient, d.signing_key, d.fingerprint, d.state, d.approved_by, d.created_at, d.updated_at, d.revoked_at
	FROM cv_devices d
	JOIN cv_members m ON m.user_id = d.user_id AND m.source_id = ? AND m.state = 'active'
	JOIN members w ON w.user_id = d.user_id AND w.workspace_id = d.workspace_id
	WHERE d.workspace_id = ? AND d.state IN ('approved', 'active') ORDER BY d.id`

func eligibleIn(q func(string, ...any) (*sql.Rows, error), workspaceID, sourceID string) ([]ContextDevice, error) {
	rows, err := q(eligibleSQL, sourceID, workspaceID)
	if err != nil {
		return nil, fmt.Errorf("eligible devices: %w", err)
	}
	return collect(rows, scanCVDevice)
}

func (s *DB) EligibleContextDevices(ctx context.Context, workspaceID, sourceID string) ([]ContextDevice, error) {
	return eligibleIn(func(q string, a ...any) (*sql.Rows, error) { return s.query(ctx, q, a...) }, workspaceID, sourceID)
}

func (s *DB) EmitContextKeys(ctx context.Context, workspaceID, sourceID string, keys []ContextKey, check func([]ContextDevice) error, audit AuditEntry) ([]ContextKey, error) {
	var added []ContextKey
	err := s.exec(ctx, func(tx *Tx) error {
		el, err := eligibleIn(tx.Query, workspaceID, sourceID)
		if err != nil {
			return err
		}
		if err := check(el); err != nil {
			return err
		}
		if added, err = insertCVKeys(tx, keys); err != nil {
			return err
		}
		if len(added) == 0 {
			return nil
		}
		return insertAudit(tx, audit)
	})
	return added, err
}

func (s *DB) MaterializeContextKeys(ctx context.Context, deviceID string, refs []ContextKey, now time.Time) ([]ContextKey, error) {
	var out []ContextKey
	err := s.exec(ctx, func(tx *Tx) error {
		out = nil
		for _, r := range refs {
			if _, err := tx.Exec(`UPDATE cv_keys SET state = 'materialized', materialized_at = ? WHERE source_id = ? AND epoch = ? AND device_id = ? AND state = 'emitted'`, ts(now), r.SourceID, r.Epoch, deviceID); err != nil {
				return err
			}
			k, err := scanCVKey(tx.QueryRow(`SELECT `+cvKeyCols+` FROM cv_keys WHERE source_id = ? AND epoch = ? AND device_id = ?`, r.SourceID, r.Epoch, deviceID))
			if err != nil {
				return fmt.Errorf("no key of epoch %d of %s for this device: %w", r.Epoch, r.SourceID, notFound(err))
			}
			out = append(out, k)
		}
		return nil
	})
	return out, err
}

func (s *DB) ContextObligations(ctx context.Context, workspaceID, deviceID string) ([]ContextObligation, error) {
	// For every key the device holds of a source it is still eligible for,
	// the eligible devices without that key.
	rows, err := s.query(ctx, `SELECT k.source_id, k.epoch, d.id, d.workspace_id, d.user_id, d.install_id, d.name, d.recipient, d.signing_key, d.fingerprint, d.state, d.approved_by, d.created_at, d.updated_at, d.revoked_at
		FROM cv_keys k
		JOIN cv_sources s ON s.id = k.source_id AND s.workspace_id = ?
		JOIN cv_members m ON m.source_id = k.source_id AND m.state = 'active'
		JOIN members w ON w.workspace_id = s.workspace_id AND w.user_id = m.user_id
		JOIN cv_devices d ON d.workspace_id = s.workspace_id AND d.user_id = m.user_id AND d.state IN ('approved', 'active')
		WHERE k.device_id = ?
		  AND EXISTS (SELECT 1 FROM cv_devices me
		      JOIN cv_members mm ON mm.source_id = k.source_id AND mm.user_id = me.user_id AND mm.state = 'active'
		      JOIN members mw ON mw.workspace_id = me.workspace_id AND mw.user_id = me.user_id
		      WHERE me.id = k.device_id AND me.state IN ('approved', 'active'))
		  AND NOT EXISTS (SELECT 1 FROM cv_keys h WHERE h.source_id = k.source_id AND h.epoch = k.epoch AND h.device_id = d.id)
		ORDER BY k.source_id, k.epoch, d.id`, workspaceID, deviceID)
	if err != nil {
		return nil, fmt.Errorf("grant obligations: %w", err)
	}
	return collect(rows, func(sc scanner) (ContextObligation, error) {
		var o ContextObligation
		var c, u string
		var r sql.NullString
		d := &o.Device
		err := sc.Scan(&o.SourceID, &o.Epoch, &d.ID, &d.WorkspaceID, &d.UserID, &d.InstallID, &d.Name, &d.Recipient, &d.SigningKey, &d.Fingerprint, &d.State, &d.ApprovedBy, &c, &u, &r)
		d.CreatedAt, d.UpdatedAt, d.RevokedAt = parseTS(c), parseTS(u), nullTS(r)
		return o, err
	})
}

func (s *DB) ContextHolders(ctx context.Context, workspaceID, deviceID string) ([]ContextHolder, error) {
	// Devices with the current epoch key of a source the caller is
	// eligible for, that are not eligible themselves.
	rows, err := s.query(ctx, `SELECT s.id, s.epoch, d.id, d.workspace_id, d.user_id, d.install_id, d.name, d.recipient, d.signing_key, d.fingerprint, d.state, d.approved_by, d.created_at, d.updated_at, d.revoked_at
		FROM cv_sources s
		JOIN cv_keys k ON k.source_id = s.id AND k.epoch = s.epoch
		JOIN cv_devices d ON d.id = k.device_id
		WHERE s.workspace_id = ? AND s.kind = 'vault'
		  AND EXISTS (SELECT 1 FROM cv_devices me
		      JOIN cv_members mm ON mm.source_id = s.id AND mm.user_id = me.user_id AND mm.state = 'active'
		      JOIN members mw ON mw.workspace_id = me.workspace_id AND mw.user_id = me.user_id
		      WHERE me.id = ? AND me.state IN ('approved', 'active'))
		  AND NOT (d.state IN ('approved', 'active')
		      AND EXISTS (SELECT 1 FROM cv_members m WHERE m.source_id = s.id AND m.user_id = d.user_id AND m.state = 'active')
		      AND EXISTS (SELECT 1 FROM members w WHERE w.workspace_id = s.workspace_id AND w.user_id = d.user_id))
		ORDER BY s.id, d.id`, workspaceID, deviceID)
	if err != nil {
		return nil, fmt.Errorf("revoked holders: %w", err)
	}
	return collect(rows, func(sc scanner) (ContextHolder, error) {
		var h ContextHolder
		var c, u string
		var r sql.NullString
		d := &h.Device
		err := sc.Scan(&h.SourceID, &h.Epoch, &d.ID, &d.WorkspaceID, &d.UserID, &d.InstallID, &d.Name, &d.Recipient, &d.SigningKey, &d.Fingerprint, &d.State, &d.ApprovedBy, &c, &u, &r)
		d.CreatedAt, d.UpdatedAt, d.RevokedAt = parseTS(c), parseTS(u), nullTS(r)
		return h, err
	})
}

// ---- epochs ----

func (s *DB) PublishContextEpoch(ctx context.Context, workspaceID string, e ContextEpoch, keys []ContextKey, check func([]ContextDevice) error, audit AuditEntry) error {
	return s.exec(ctx, func(tx *Tx) error {
		// The conditional update is the lock: of two devices publishing the
		// same epoch, one changes the row and the other finds it changed.
		res, err := tx.Exec(`UPDATE cv_sources SET epoch = ?, rotation_requested_at = NULL, updated_at = ? WHERE workspace_id = ? AND id = ? AND epoch = ? AND kind = 'vault'`,
			e.Epoch, ts(e.CreatedAt), workspaceID, e.SourceID, e.Epoch-1)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			var cur int64
			if err := tx.QueryRow(`SELECT epoch FROM cv_sources WHERE workspace_id = ? AND id = ?`, workspaceID, e.SourceID).Scan(&cur); err != nil {
				return notFound(err)
			}
			return fmt.Errorf("the vault is at epoch %d, so %d cannot be published: %w", cur, e.Epoch, ErrConflict)
		}
		el, err := eligibleIn(tx.Query, workspaceID, e.SourceID)
		if err != nil {
			return err
		}
		if err := check(el); err != nil {
			return err
		}
		if _, err := tx.Exec(`INSERT INTO cv_epochs (source_id, epoch, created_by, reason, created_at) VALUES (?,?,?,?,?)`, e.SourceID, e.Epoch, e.CreatedBy, e.Reason, ts(e.CreatedAt)); err != nil {
			return fmt.Errorf("record epoch: %w", err)
		}
		if _, err := insertCVKeys(tx, keys); err != nil {
			return err
		}
		return insertAudit(tx, audit)
	})
}

func (s *DB) ContextEpochs(ctx context.Context, workspaceID string) ([]ContextEpoch, error) {
	rows, err := s.query(ctx, `SELECT e.source_id, e.epoch, e.created_by, e.reason, e.created_at,
		(SELECT count(*) FROM cv_keys k WHERE k.source_id = e.source_id AND k.epoch = e.epoch)
		FROM cv_epochs e JOIN cv_sources s ON s.id = e.source_id WHERE s.workspace_id = ? ORDER BY e.source_id, e.epoch`, workspaceID)
	if err != nil {
		return nil, fmt.Errorf("list epochs: %w", err)
	}
	return collect(rows, func(sc scanner) (ContextEpoch, error) {
		var e ContextEpoch
		var c string
		err := sc.Scan(&e.SourceID, &e.Epoch, &e.CreatedBy, &e.Reason, &c, &e.Recipients)
		e.CreatedAt = parseTS(c)
		return e, err
	})
}

// ---- events ----

const cvEventCols = `source_id, seq, event_id, entry_id, kind, epoch, base, use_when, update_when, path, commit_sha, ciphertext, digest, device_id, created_at`

func scanCVEvent(sc scanner) (ContextEvent, error) {
	var e ContextEvent
	var c string
	err := sc.Scan(&e.SourceID, &e.Seq, &e.EventID, &e.EntryID, &e.Kind, &e.Epoch, &e.Base, &e.UseWhen, &e.UpdateWhen, &e.Path, &e.Commit, &e.Ciphertext, &e.Digest, &e.DeviceID, &c)
	e.CreatedAt = parseTS(c)
	return e, err
}

func (s *DB) AppendContextEvents(ctx context.Context, workspaceID, sourceID string, events []ContextEvent, check func(ContextSource) error) ([]ContextPushResult, int64, error) {
	var results []ContextPushResult
	var head int64
	err := s.exec(ctx, func(tx *Tx) error {
		results = results[:0]
		// Touching the row first takes its lock (PostgreSQL), so the
		// numbering below is in commit order.
		if _, err := tx.Exec(`UPDATE cv_sources SET updated_at = updated_at WHERE workspace_id = ? AND id = ?`, workspaceID, sourceID); err != nil {
			return err
		}
		src, err := scanCVSource(tx.QueryRow(`SELECT `+cvSourceCols+` FROM cv_sources WHERE workspace_id = ? AND id = ?`, workspaceID, sourceID))
		if err != nil {
			return notFound(err)
		}
		if err := check(src); err != nil {
			return err
		}
		head = src.HeadSeq
		inBatch := map[string]bool{}
		for _, e := range events {
			var seq int64
			var digest string
			err := tx.QueryRow(`SELECT seq, digest FROM cv_events WHERE source_id = ? AND event_id = ?`, sourceID, e.EventID).Scan(&seq, &digest)
			switch {
			case err == nil:
				if digest != e.Digest {
					return fmt.Errorf("event %s was pushed before with other content: %w", e.EventID, ErrConflict)
				}
				results = append(results, ContextPushResult{EventID: e.EventID, Seq: seq, Duplicate: true})
				continue
			case !errors.Is(err, sql.ErrNoRows):
				return err
			}
			if inBatch[e.EventID] {
				return fmt.Errorf("event %s appears twice in one push: %w", e.EventID, ErrConflict)
			}
			if e.Base != "" && !inBatch[e.Base] {
				var n int
				if err := tx.QueryRow(`SELECT count(*) FROM cv_events WHERE source_id = ? AND event_id = ? AND entry_id = ?`, sourceID, e.Base, e.EntryID).Scan(&n); err != nil {
					return err
				}
				if n == 0 {
					return fmt.Errorf("event %s replaces %s, which this source does not have for entry %s: %w", e.EventID, e.Base, e.EntryID, ErrUnknownBase)
				}
			}
			head++
			if _, err := tx.Exec(`INSERT INTO cv_events (`+cvEventCols+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
				sourceID, head, e.EventID, e.EntryID, e.Kind, e.Epoch, e.Base, e.UseWhen, e.UpdateWhen, e.Path, e.Commit, e.Ciphertext, e.Digest, e.DeviceID, ts(e.CreatedAt)); err != nil {
				return fmt.Errorf("append event: %w", err)
			}
			inBatch[e.EventID] = true
			results = append(results, ContextPushResult{EventID: e.EventID, Seq: head})
		}
		if head != src.HeadSeq {
			if _, err := tx.Exec(`UPDATE cv_sources SET head_seq = ? WHERE id = ?`, head, sourceID); err != nil {
				return err
			}
		}
		return nil
	})
	return results, head, err
}

func (s *DB) ContextEvents(ctx context.Context, sourceID string, afterSeq int64, limit int) ([]ContextEvent, error) {
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	rows, err := s.query(ctx, `SELECT `+cvEventCols+` FROM cv_events WHERE source_id = ? AND seq > ? ORDER BY seq LIMIT ?`, sourceID, afterSeq, limit)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return collect(rows, scanCVEvent)
}

func (s *DB) ContextEvent(ctx context.Context, sourceID, eventID string) (ContextEvent, error) {
	e, err := scanCVEvent(s.queryRow(ctx, `SELECT `+cvEventCols+` FROM cv_events WHERE source_id = ? AND event_id = ?`, sourceID, eventID))
	return e, notFound(err)
}

// ---- proposals and proofs ----

const cvProposalCols = `id, workspace_id, source_id, session_id, correction_kind, target_kind, state, digest, sealed, sealed_to, proof_id, event_id, writeback, created_by, created_at, decided_by, decided_at, reason`

func scanCVProposal(sc scanner) (ContextProposal, error) {
	var p ContextProposal
	var to, c string
	var d sql.NullString
	if err := sc.Scan(&p.ID, &p.WorkspaceID, &p.SourceID, &p.SessionID, &p.CorrectionKind, &p.TargetKind, &p.State, &p.Digest, &p.Sealed, &to, &p.ProofID, &p.EventID, &p.Writeback, &p.CreatedBy, &c, &p.DecidedBy, &d, &p.Reason); err != nil {
		return ContextProposal{}, err
	}
	if err := json.Unmarshal([]byte(to), &p.SealedTo); err != nil {
		return ContextProposal{}, fmt.Errorf("decode sealed_to: %w", err)
	}
	p.CreatedAt, p.DecidedAt = parseTS(c), nullTS(d)
	return p, nil
}

func proposalArgs(p ContextProposal) []any {
	to, _ := json.Marshal(orEmpty(p.SealedTo))
	return []any{p.ID, p.WorkspaceID, p.SourceID, p.SessionID, p.CorrectionKind, p.TargetKind, p.State, p.Digest, p.Sealed, string(to), p.ProofID, p.EventID, p.Writeback, p.CreatedBy, ts(p.CreatedAt), p.DecidedBy, tsOrNil(p.DecidedAt), p.Reason}
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func (s *DB) CreateContextProposal(ctx context.Context, p ContextProposal, audit AuditEntry) error {
	return s.exec(ctx, func(tx *Tx) error {
		if _, err := tx.Exec(`INSERT INTO cv_proposals (`+cvProposalCols+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`, proposalArgs(p)...); err != nil {
			return fmt.Errorf("create proposal: %w", err)
		}
		return insertAudit(tx, audit)
	})
}

func (s *DB) ContextProposal(ctx context.Context, workspaceID, id string) (ContextProposal, error) {
	p, err := scanCVProposal(s.queryRow(ctx, `SELECT `+cvProposalCols+` FROM cv_proposals WHERE workspace_id = ? AND id = ?`, workspaceID, id))
	return p, notFound(err)
}

func (s *DB) ContextProposals(ctx context.Context, workspaceID, state string) ([]ContextProposal, error) {
	q := `SELECT ` + cvProposalCols + ` FROM cv_proposals WHERE workspace_id = ?`
	args := []any{workspaceID}
	if state != "" {
		q += ` AND state = ?`
		args = append(args, state)
	}
	rows, err := s.query(ctx, q+` ORDER BY id`, args...)
	if err != nil {
		return nil, fmt.Errorf("list proposals: %w", err)
	}
	return collect(rows, scanCVProposal)
}

func (s *DB) UpdateContextProposal(ctx context.Context, workspaceID, id string, fn func(*ContextProposal) error, audit AuditEntry) (ContextProposal, error) {
	var out ContextProposal
	err := s.exec(ctx, func(tx *Tx) error {
		p, err := scanCVProposal(tx.QueryRow(`SELECT `+cvProposalCols+` FROM cv_proposals WHERE workspace_id = ? AND id = ?`, workspaceID, id))
		if err != nil {
			return notFound(err)
		}
		if err := fn(&p); err != nil {
			return err
		}
		to, _ := json.Marshal(orEmpty(p.SealedTo))
		if _, err := tx.Exec(`UPDATE cv_proposals SET state = ?, sealed = ?, sealed_to = ?, proof_id = ?, event_id = ?, writeback = ?, decided_by = ?, decided_at = ?, reason = ? WHERE id = ?`,
			p.State, p.Sealed, string(to), p.ProofID, p.EventID, p.Writeback, p.DecidedBy, tsOrNil(p.DecidedAt), p.Reason, id); err != nil {
			return fmt.Errorf("update proposal: %w", err)
		}
		out = p
		return insertAudit(tx, audit)
	})
	return out, err
}

func (s *DB) CreateContextProof(ctx context.Context, p ContextProof, fn func() error, audit AuditEntry) error {
	return s.exec(ctx, func(tx *Tx) error {
		if _, err := tx.Exec(`INSERT INTO cv_proofs (id, workspace_id, proposal_id, source_id, candidate_digest, base_seq, device_id, mac, issued_at) VALUES (?,?,?,?,?,?,?,?,?)`,
			p.ID, p.WorkspaceID, p.ProposalID, p.SourceID, p.CandidateDigest, p.BaseSeq, p.DeviceID, p.MAC, ts(p.IssuedAt)); err != nil {
			return fmt.Errorf("create proof: %w", err)
		}
		if p.ProposalID != "" {
			// A pending proposal becomes previewed; a decided one is left.
			if _, err := tx.Exec(`UPDATE cv_proposals SET state = 'previewed', proof_id = ? WHERE id = ? AND state IN ('pending', 'previewed')`, p.ID, p.ProposalID); err != nil {
				return err
			}
		}
		if fn != nil {
			if err := fn(); err != nil {
				return err
			}
		}
		return insertAudit(tx, audit)
	})
}

func (s *DB) ContextProof(ctx context.Context, workspaceID, id string) (ContextProof, error) {
	var p ContextProof
	var c string
	err := s.queryRow(ctx, `SELECT id, workspace_id, proposal_id, source_id, candidate_digest, base_seq, device_id, mac, issued_at FROM cv_proofs WHERE workspace_id = ? AND id = ?`, workspaceID, id).
		Scan(&p.ID, &p.WorkspaceID, &p.ProposalID, &p.SourceID, &p.CandidateDigest, &p.BaseSeq, &p.DeviceID, &p.MAC, &c)
	p.IssuedAt = parseTS(c)
	return p, notFound(err)
}

// ---- backups ----

func (s *DB) PutContextBackup(ctx context.Context, b *ContextBackup, audit AuditEntry) error {
	return s.exec(ctx, func(tx *Tx) error {
		var gen int64
		err := tx.QueryRow(`SELECT generation FROM cv_backups WHERE workspace_id = ? AND device_id = ?`, b.WorkspaceID, b.DeviceID).Scan(&gen)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		b.Generation = gen + 1
		if _, err := tx.Exec(`INSERT INTO cv_backups (workspace_id, device_id, user_id, sealed, generation, created_at) VALUES (?,?,?,?,?,?)
			ON CONFLICT (workspace_id, device_id) DO UPDATE SET user_id = excluded.user_id, sealed = excluded.sealed, generation = excluded.generation, created_at = excluded.created_at`,
			b.WorkspaceID, b.DeviceID, b.UserID, b.Sealed, b.Generation, ts(b.CreatedAt)); err != nil {
			return fmt.Errorf("store backup: %w", err)
		}
		return insertAudit(tx, audit)
	})
}

func (s *DB) ContextBackups(ctx context.Context, workspaceID string, userID int64) ([]ContextBackup, error) {
	rows, err := s.query(ctx, `SELECT workspace_id, device_id, user_id, sealed, generation, created_at FROM cv_backups WHERE workspace_id = ? AND user_id = ? ORDER BY created_at DESC, device_id`, workspaceID, userID)
	if err != nil {
		return nil, fmt.Errorf("list backups: %w", err)
	}
	return collect(rows, func(sc scanner) (ContextBackup, error) {
		var b ContextBackup
		var c string
		err := sc.Scan(&b.WorkspaceID, &b.DeviceID, &b.UserID, &b.Sealed, &b.Generation, &c)
		b.CreatedAt = parseTS(c)
		return b, err
	})
}

// ---- working sets ----

func (s *DB) PutContextWorkingSet(ctx context.Context, w ContextWorkingSet) error {
	ids, _ := json.Marshal(orEmpty(w.SourceIDs))
	return s.exec(ctx, func(tx *Tx) error {
		_, err := tx.Exec(`INSERT INTO cv_working_sets (workspace_id, session_id, task, source_ids, composed_at) VALUES (?,?,?,?,?)
			ON CONFLICT (workspace_id, session_id) DO UPDATE SET task = excluded.task, source_ids = excluded.source_ids, composed_at = excluded.composed_at`,
			w.WorkspaceID, w.SessionID, w.Task, string(ids), ts(w.ComposedAt))
		return err
	})
}

func (s *DB) ContextWorkingSet(ctx context.Context, workspaceID, sessionID string) (ContextWorkingSet, error) {
	var w ContextWorkingSet
	var ids, c string
	err := s.queryRow(ctx, `SELECT workspace_id, session_id, task, source_ids, composed_at FROM cv_working_sets WHERE workspace_id = ? AND session_id = ?`, workspaceID, sessionID).
		Scan(&w.WorkspaceID, &w.SessionID, &w.Task, &ids, &c)
	if err != nil {
		return w, notFound(err)
	}
	w.ComposedAt = parseTS(c)
	return w, json.Unmarshal([]byte(ids), &w.SourceIDs)
}

// collect scans every row with scan and closes rows.
func collect[T any](rows *sql.Rows, scan func(scanner) (T, error)) ([]T, error) {
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
