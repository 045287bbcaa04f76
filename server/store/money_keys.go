package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// ProviderKey is a model-provider key of a workspace. Sealed is the secret
// sealed by server/secrets (nil for a pass-through key without one); it
// never leaves the server except through the gateway's key-material route.
type ProviderKey struct {
	ID          string
	WorkspaceID string
	Provider    string
	Mode        string
	TeamID      *int64
	KeyRef      *string
	Fingerprint string
	Version     int64
	Sealed      []byte
	CreatedBy   string
	CreatedAt   time.Time
	UpdatedAt   time.Time
	RotatedAt   *time.Time
}

// ProviderKeySecretName is the record name a provider key's secret is
// sealed under (the name is authenticated: a sealed value copied to
// another key does not open).
func ProviderKeySecretName(id string) string { return "provider-key/" + id }

const pkCols = `id, workspace_id, provider, mode, team_id, key_ref, fingerprint, version, sealed, created_by, created_at, updated_at, rotated_at`

func scanProviderKey(sc scanner) (ProviderKey, error) {
	var k ProviderKey
	var team sql.NullInt64
	var ref, fp, rot sql.NullString
	var c, u string
	if err := sc.Scan(&k.ID, &k.WorkspaceID, &k.Provider, &k.Mode, &team, &ref, &fp, &k.Version, &k.Sealed, &k.CreatedBy, &c, &u, &rot); err != nil {
		return ProviderKey{}, err
	}
	if team.Valid {
		k.TeamID = &team.Int64
	}
	if ref.Valid {
		k.KeyRef = &ref.String
	}
	k.Fingerprint, k.CreatedAt, k.UpdatedAt, k.RotatedAt = fp.String, parseTS(c), parseTS(u), nullTS(rot)
	return k, nil
}

func nullStr(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// CreateProviderKey stores a new key (ID filled when empty).
func (s *DB) CreateProviderKey(ctx context.Context, k *ProviderKey, audit AuditEntry) error {
	if k.ID == "" {
		k.ID = newID()
	}
	return s.execSimple(ctx, func(tx *Tx) error {
		var team any
		if k.TeamID != nil {
			team = *k.TeamID
		}
		var ref any
		if k.KeyRef != nil {
			ref = *k.KeyRef
		}
		if _, err := tx.Exec(`INSERT INTO provider_keys (`+pkCols+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)`,
			k.ID, k.WorkspaceID, k.Provider, k.Mode, team, ref, nullStr(k.Fingerprint), k.Version, k.Sealed, k.CreatedBy, ts(k.CreatedAt), ts(k.UpdatedAt), tsOrNil(k.RotatedAt)); err != nil {
			if isUniqueViolation(err) {
				return ErrConflict
			}
			return fmt.Errorf("create provider key: %w", err)
		}
		return insertAudit(tx, audit)
	})
}

// ProviderKey returns one key of a workspace.
func (s *DB) ProviderKey(ctx context.Context, workspaceID, id string) (ProviderKey, error) {
	k, err := scanProviderKey(s.queryRow(ctx, `SELECT `+pkCols+` FROM provider_keys WHERE workspace_id = ? AND id = ?`, workspaceID, id))
	return k, notFound(err)
}

// ProviderKeys lists a workspace's keys, oldest first.
func (s *DB) ProviderKeys(ctx context.Context, workspaceID string) ([]ProviderKey, error) {
	rows, err := s.query(ctx, `SELECT `+pkCols+` FROM provider_keys WHERE workspace_id = ? ORDER BY created_at, id LIMIT 1000`, workspaceID)
	if err != nil {
		return nil, fmt.Errorf("list provider keys: %w", err)
	}
	return collect(rows, scanProviderKey)
}

// UpdateProviderKey applies fn to the current key and stores it, in one
// write transaction (rotation: a new secret, fingerprint and version).
func (s *DB) UpdateProviderKey(ctx context.Context, workspaceID, id string, fn func(*ProviderKey) error, audit AuditEntry) (ProviderKey, error) {
	var out ProviderKey
	err := s.exec(ctx, func(tx *Tx) error {
		k, err := scanProviderKey(tx.QueryRow(`SELECT `+pkCols+` FROM provider_keys WHERE workspace_id = ? AND id = ?`, workspaceID, id))
		if err != nil {
			return notFound(err)
		}
		if err := fn(&k); err != nil {
			return err
		}
		if _, err := tx.Exec(`UPDATE provider_keys SET fingerprint = ?, version = ?, sealed = ?, updated_at = ?, rotated_at = ? WHERE id = ?`,
			nullStr(k.Fingerprint), k.Version, k.Sealed, ts(k.UpdatedAt), tsOrNil(k.RotatedAt), k.ID); err != nil {
			return fmt.Errorf("update provider key: %w", err)
		}
		out = k
		return insertAudit(tx, audit)
	})
	return out, err
}

// DeleteProviderKey removes a key and its sealed secret.
func (s *DB) DeleteProviderKey(ctx context.Context, workspaceID, id string, audit AuditEntry) error {
	return s.execSimple(ctx, func(tx *Tx) error {
		res, err := tx.Exec(`DELETE FROM provider_keys WHERE workspace_id = ? AND id = ?`, workspaceID, id)
		if err != nil {
			return fmt.Errorf("delete provider key: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrNotFound
		}
		return insertAudit(tx, audit)
	})
}

// RewrapSecrets passes every sealed value the store keeps (the secrets
// table: signing keys and the like; provider keys' secrets) through fn and
// stores what it returns, all in ONE write transaction: a failure on any
// record leaves every record as it was. names are the records' sealing
// names. It returns how many values changed.
func (s *DB) RewrapSecrets(ctx context.Context, fn func(name string, rec []byte) ([]byte, error)) (int, error) {
	var changed int
	err := s.exec(ctx, func(tx *Tx) error {
		changed = 0
		type item struct {
			table, key, name string
			val              []byte
		}
		var items []item
		rows, err := tx.Query(`SELECT name, value FROM secrets ORDER BY name`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var it item
			if err := rows.Scan(&it.key, &it.val); err != nil {
				rows.Close()
				return err
			}
			it.table, it.name = "secrets", it.key
			items = append(items, it)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = tx.Query(`SELECT id, sealed FROM provider_keys WHERE sealed IS NOT NULL ORDER BY id`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var it item
			if err := rows.Scan(&it.key, &it.val); err != nil {
				rows.Close()
				return err
			}
			it.table, it.name = "provider_keys", ProviderKeySecretName(it.key)
			items = append(items, it)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, it := range items {
			next, err := fn(it.name, it.val)
			if err != nil {
				return fmt.Errorf("%s: %w", it.name, err)
			}
			if string(next) == string(it.val) {
				continue
			}
			q := `UPDATE secrets SET value = ? WHERE name = ?`
			if it.table == "provider_keys" {
				q = `UPDATE provider_keys SET sealed = ? WHERE id = ?`
			}
			if _, err := tx.Exec(q, next, it.key); err != nil {
				return err
			}
			changed++
		}
		return nil
	})
	if err != nil {
		return 0, errors.Join(errors.New("re-wrap secrets (nothing changed)"), err)
	}
	return changed, nil
}
