package store

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// The access index (migration 0003): for the records of a collection with
// an access function, the principals that may see each record, kept in
// record_access by the transaction that writes the record. An authorized
// list then reads, per principal of the caller, the next seqs it may see,
// instead of decoding every record of the collection.

// AccessFunc names the principals that may see a record ("*" for
// everyone, "user:7", "group:…"; the meaning is the caller's). An empty
// result means nobody but the roles that see everything.
type AccessFunc func(Record) []string

// accessIndex is the registered function of a collection and its version.
type accessIndex struct {
	fn      AccessFunc
	version string
}

// noPrincipal marks a record indexed with no principal, so the start-up
// rebuild knows it was indexed.
const noPrincipal = "-"

// markerPrefix names the row that records which version of a collection's
// access function built its rows; it lives in workspace "" (no workspace
// has that id) at record_seq 0.
const markerPrefix = "index-version:"

func (s *DB) accessOf(collection string) (accessIndex, bool) {
	v, ok := s.access.Load(collection)
	if !ok {
		return accessIndex{}, false
	}
	return v.(accessIndex), true
}

// IndexAccess registers fn as the access function of collection. Every
// later write of one of its records keeps its index rows current. When the
// stored rows were built by another version of the function (or none, as
// right after migration 0003), they are rebuilt from the records now.
func (s *DB) IndexAccess(ctx context.Context, collection, version string, fn AccessFunc) error {
	s.access.Store(collection, accessIndex{fn: fn, version: version})
	marker := markerPrefix + version
	var n int
	if err := s.queryRow(ctx, `SELECT count(*) FROM record_access WHERE workspace_id = '' AND collection = ? AND principal = ? AND record_seq = 0`, collection, marker).Scan(&n); err != nil {
		return fmt.Errorf("access index of %s: %w", collection, unavailable(err))
	}
	if n == 1 {
		return nil
	}
	// Rebuild: every record of the collection, in pages, each page in one
	// transaction that reads the records it indexes (a concurrent writer
	// is serialized with it, so no stale row survives).
	var after int64
	for {
		var last int64
		var count int
		err := s.exec(ctx, func(tx *Tx) error {
			rows, err := tx.Query(`SELECT `+recCols+` FROM records WHERE collection = ? AND seq > ? ORDER BY seq LIMIT 500`, collection, after)
			if err != nil {
				return err
			}
			recs, err := collect(rows, scanRecord)
			if err != nil {
				return err
			}
			count, last = len(recs), after
			for _, r := range recs {
				if err := s.reindex(tx, r); err != nil {
					return err
				}
				last = r.Seq
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("rebuild access index of %s: %w", collection, err)
		}
		after = last
		if count < 500 {
			break
		}
	}
	return s.exec(ctx, func(tx *Tx) error {
		if _, err := tx.Exec(`DELETE FROM record_access WHERE workspace_id = '' AND collection = ? AND record_seq = 0`, collection); err != nil {
			return err
		}
		_, err := tx.Exec(`INSERT INTO record_access (workspace_id, collection, principal, record_seq) VALUES ('', ?, ?, 0) ON CONFLICT DO NOTHING`, collection, marker)
		return err
	})
}

// principalsOf is the deduplicated, sorted principal set of r.
func principalsOf(ix accessIndex, r Record) []string {
	ps := ix.fn(r)
	out := make([]string, 0, len(ps)+1)
	for _, p := range ps {
		if p != "" && p != noPrincipal {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		out = append(out, noPrincipal)
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// reindex brings r's index rows to what its collection's access function
// says now, writing only the difference (a session whose sync changes its
// status but not its ACL writes nothing here).
func (s *DB) reindex(tx *Tx, r Record) error {
	ix, ok := s.accessOf(r.Collection)
	if !ok {
		return nil
	}
	want := principalsOf(ix, r)
	// By record_seq alone (a seq names one record): with the workspace and
	// collection too, SQLite may pick the primary key and scan the
	// collection's rows.
	rows, err := tx.Query(`SELECT principal FROM record_access WHERE record_seq = ?`, r.Seq)
	if err != nil {
		return fmt.Errorf("read access index: %w", err)
	}
	have, err := collect(rows, func(sc scanner) (string, error) {
		var p string
		err := sc.Scan(&p)
		return p, err
	})
	if err != nil {
		return fmt.Errorf("read access index: %w", err)
	}
	for _, p := range have {
		if _, found := slices.BinarySearch(want, p); !found {
			if _, err := tx.Exec(`DELETE FROM record_access WHERE workspace_id = ? AND collection = ? AND principal = ? AND record_seq = ?`, r.WorkspaceID, r.Collection, p, r.Seq); err != nil {
				return fmt.Errorf("update access index: %w", err)
			}
		}
	}
	for _, p := range want {
		if !slices.Contains(have, p) {
			if _, err := tx.Exec(`INSERT INTO record_access (workspace_id, collection, principal, record_seq) VALUES (?,?,?,?) ON CONFLICT DO NOTHING`, r.WorkspaceID, r.Collection, p, r.Seq); err != nil {
				return fmt.Errorf("update access index: %w", err)
			}
		}
	}
	return nil
}

// unindex drops the index rows of a deleted record.
func (s *DB) unindex(tx *Tx, collection string, seq int64) error {
	if _, ok := s.accessOf(collection); !ok {
		return nil
	}
	_, err := tx.Exec(`DELETE FROM record_access WHERE record_seq = ?`, seq)
	return err
}

// RecordsFor lists, in seq order after opts.After, the records of an
// indexed collection that any of principals may see. Each principal's
// seqs come from the index in order, at most one page each, so the cost
// follows the page and the caller's principals, not the collection.
func (s *DB) RecordsFor(ctx context.Context, workspaceID, collection string, principals []string, opts ListOptions) ([]Record, error) {
	limit := opts.Limit
	if limit <= 0 || limit > 500 {
		limit = 100
	}
	if _, ok := s.accessOf(collection); !ok {
		return nil, fmt.Errorf("records for: collection %s has no access index", collection)
	}
	seen := map[int64]bool{}
	var seqs []int64
	for _, p := range principals {
		if p == "" || p == noPrincipal {
			continue
		}
		rows, err := s.query(ctx, `SELECT record_seq FROM record_access WHERE workspace_id = ? AND collection = ? AND principal = ? AND record_seq > ? ORDER BY record_seq LIMIT ?`,
			workspaceID, collection, p, opts.After, limit)
		if err != nil {
			return nil, fmt.Errorf("records for: %w", err)
		}
		got, err := collect(rows, func(sc scanner) (int64, error) {
			var n int64
			err := sc.Scan(&n)
			return n, err
		})
		if err != nil {
			return nil, fmt.Errorf("records for: %w", err)
		}
		for _, n := range got {
			if !seen[n] {
				seen[n] = true
				seqs = append(seqs, n)
			}
		}
	}
	slices.Sort(seqs)
	if len(seqs) > limit {
		seqs = seqs[:limit]
	}
	if len(seqs) == 0 {
		return []Record{}, nil
	}
	args := make([]any, 0, len(seqs)+2)
	args = append(args, workspaceID, collection)
	for _, n := range seqs {
		args = append(args, n)
	}
	q := `SELECT ` + recCols + ` FROM records WHERE workspace_id = ? AND collection = ? AND seq IN (?` + strings.Repeat(",?", len(seqs)-1) + `) ORDER BY seq`
	// The IN list varies in length: not worth a prepared statement each.
	rows, err := s.read.QueryContext(ctx, s.bind(q), args...)
	if err != nil {
		return nil, fmt.Errorf("records for: %w", unavailable(err))
	}
	return collect(rows, scanRecord)
}

// KeyedCollections lists the collections under prefix (for example
// "share-groups/") holding a record with natural key key: the share
// groups a user belongs to, in one indexed range read.
func (s *DB) KeyedCollections(ctx context.Context, workspaceID, prefix, key string) ([]string, error) {
	rows, err := s.query(ctx, `SELECT collection FROM records WHERE workspace_id = ? AND collection >= ? AND collection < ? AND natural_key = ? ORDER BY collection`,
		workspaceID, prefix, prefixEnd(prefix), key)
	if err != nil {
		return nil, fmt.Errorf("keyed collections: %w", err)
	}
	return collect(rows, func(sc scanner) (string, error) {
		var c string
		err := sc.Scan(&c)
		return c, err
	})
}

// prefixEnd is the least string greater than every string with prefix
// (prefix ends in an ASCII byte below 0x7f, as collection paths do).
func prefixEnd(prefix string) string {
	if prefix == "" {
		return "\x7f"
	}
	b := []byte(prefix)
	b[len(b)-1]++
	return string(b)
}
