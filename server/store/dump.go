package store

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// Export and Import move a store's data between engines (SQLite to
// PostgreSQL, or back) through a dump: JSON lines of a header, then per
// table its columns and rows, then a trailer counting the rows, so that a
// truncated dump is refused rather than half imported. Values keep their
// stored form (timestamps are text on both engines); bytes are base64.

// dumpFormat is the version of the dump's layout.
const dumpFormat = 1

type dumpHeader struct {
	ReeveDump     int       `json:"reeve_dump"`
	Engine        string    `json:"engine"`
	SchemaVersion int       `json:"schema_version"`
	CreatedAt     time.Time `json:"created_at"`
}

type dumpLine struct {
	Table   string           `json:"table,omitempty"`
	Columns []string         `json:"columns,omitempty"`
	Row     []any            `json:"r,omitempty"`
	End     bool             `json:"end,omitempty"`
	Counts  map[string]int64 `json:"counts,omitempty"`
}

// DumpSummary says what a dump held.
type DumpSummary struct {
	Engine        string           `json:"engine"`
	SchemaVersion int              `json:"schema_version"`
	Tables        map[string]int64 `json:"tables"` // rows per table
	Rows          int64            `json:"rows"`
}

// tables lists the store's tables (schema_migrations aside) in an order
// where every table comes after those it references.
func (s *DB) tables(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}) ([]string, error) {
	var names []string
	deps := map[string][]string{}
	list := `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name`
	if s.engine == EnginePostgres {
		list = `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name`
	}
	rows, err := q.QueryContext(ctx, list)
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return nil, err
		}
		if n != "schema_migrations" {
			names = append(names, n)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, n := range names {
		fk := `SELECT "table" FROM pragma_foreign_key_list(?)`
		if s.engine == EnginePostgres {
			fk = `SELECT confrelid::regclass::text FROM pg_constraint WHERE contype = 'f' AND conrelid = $1::regclass`
		}
		rows, err := q.QueryContext(ctx, fk, n)
		if err != nil {
			return nil, fmt.Errorf("foreign keys of %s: %w", n, err)
		}
		for rows.Next() {
			var ref string
			if err := rows.Scan(&ref); err != nil {
				rows.Close()
				return nil, err
			}
			if ref != n {
				deps[n] = append(deps[n], strings.Trim(ref, `"`))
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	// Depth-first: referenced tables first, names in order otherwise.
	var out []string
	state := map[string]int{}
	var visit func(string) error
	visit = func(n string) error {
		switch state[n] {
		case 1:
			return fmt.Errorf("foreign keys form a cycle through %s", n)
		case 2:
			return nil
		}
		state[n] = 1
		d := deps[n]
		sort.Strings(d)
		for _, r := range d {
			if err := visit(r); err != nil {
				return err
			}
		}
		state[n] = 2
		out = append(out, n)
		return nil
	}
	for _, n := range names {
		if err := visit(n); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Export writes every row of the store to w as of one snapshot.
func (s *DB) Export(ctx context.Context, w io.Writer) (DumpSummary, error) {
	sum := DumpSummary{Engine: s.engine, SchemaVersion: s.version, Tables: map[string]int64{}}
	opts := &sql.TxOptions{ReadOnly: true}
	if s.engine == EnginePostgres {
		opts.Isolation = sql.LevelRepeatableRead
	}
	tx, err := s.read.BeginTx(ctx, opts)
	if err != nil {
		return sum, fmt.Errorf("export: %w", unavailable(err))
	}
	defer tx.Rollback()
	tables, err := s.tables(ctx, tx)
	if err != nil {
		return sum, fmt.Errorf("export: %w", err)
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	enc := json.NewEncoder(bw)
	if err := enc.Encode(dumpHeader{ReeveDump: dumpFormat, Engine: s.engine, SchemaVersion: s.version, CreatedAt: time.Now().UTC()}); err != nil {
		return sum, fmt.Errorf("export: %w", err)
	}
	for _, t := range tables {
		n, err := exportTable(ctx, tx, t, enc)
		if err != nil {
			return sum, fmt.Errorf("export %s: %w", t, err)
		}
		sum.Tables[t] = n
		sum.Rows += n
	}
	if err := enc.Encode(dumpLine{End: true, Counts: sum.Tables}); err != nil {
		return sum, fmt.Errorf("export: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return sum, fmt.Errorf("export: %w", err)
	}
	return sum, nil
}

func exportTable(ctx context.Context, tx *sql.Tx, table string, enc *json.Encoder) (int64, error) {
	rows, err := tx.QueryContext(ctx, `SELECT * FROM `+quoteIdent(table))
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, err
	}
	if err := enc.Encode(dumpLine{Table: table, Columns: cols}); err != nil {
		return 0, err
	}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	var n int64
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return n, err
		}
		row := make([]any, len(cols))
		for i, v := range vals {
			row[i] = dumpValue(v)
		}
		if err := enc.Encode(dumpLine{Row: row}); err != nil {
			return n, err
		}
		n++
	}
	return n, rows.Err()
}

// dumpValue is v as JSON: bytes as {"b64": …}, times as their text.
func dumpValue(v any) any {
	switch x := v.(type) {
	case []byte:
		return map[string]string{"b64": base64.StdEncoding.EncodeToString(x)}
	case time.Time:
		return ts(x)
	default:
		return x
	}
}

func loadValue(v any) (any, error) {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i, nil
		}
		return x.Float64()
	case map[string]any:
		s, ok := x["b64"].(string)
		if !ok || len(x) != 1 {
			return nil, fmt.Errorf("unknown value %v", x)
		}
		return base64.StdEncoding.DecodeString(s)
	default:
		return x, nil
	}
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// Import loads a dump into this store, which must be empty and at the
// dump's schema version, in one transaction: on any error nothing is kept.
func (s *DB) Import(ctx context.Context, r io.Reader) (DumpSummary, error) {
	dec := json.NewDecoder(bufio.NewReaderSize(r, 1<<16))
	dec.UseNumber()
	var h dumpHeader
	if err := dec.Decode(&h); err != nil || h.ReeveDump == 0 {
		return DumpSummary{}, fmt.Errorf("import: not a reeve server dump (%v)", err)
	}
	sum := DumpSummary{Engine: h.Engine, SchemaVersion: h.SchemaVersion, Tables: map[string]int64{}}
	if h.ReeveDump != dumpFormat {
		return sum, fmt.Errorf("import: dump format %d, this build reads %d", h.ReeveDump, dumpFormat)
	}
	if h.SchemaVersion != s.version {
		return sum, fmt.Errorf("import: the dump has schema version %d and this database %d: export and import with the same reeve version", h.SchemaVersion, s.version)
	}
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return sum, fmt.Errorf("import: %w", unavailable(err))
	}
	defer tx.Rollback()
	tables, err := s.tables(ctx, tx)
	if err != nil {
		return sum, fmt.Errorf("import: %w", err)
	}
	known := map[string]bool{}
	for _, t := range tables {
		known[t] = true
		var n int64
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM `+quoteIdent(t)).Scan(&n); err != nil {
			return sum, fmt.Errorf("import: %w", err)
		}
		if n > 0 {
			return sum, fmt.Errorf("import: the target database is not empty (%s has %d rows); import into a new database", t, n)
		}
	}
	var (
		table  string
		insert string
		ncols  int
		ended  bool
	)
	for {
		var l dumpLine
		err := dec.Decode(&l)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return sum, fmt.Errorf("import: read the dump: %w", err)
		}
		switch {
		case ended:
			return sum, errors.New("import: data after the end of the dump")
		case l.End:
			for t, n := range l.Counts {
				if sum.Tables[t] != n {
					return sum, fmt.Errorf("import: the dump is damaged: %s has %d rows, its trailer says %d", t, sum.Tables[t], n)
				}
			}
			ended = true
		case l.Table != "":
			if !known[l.Table] {
				return sum, fmt.Errorf("import: the dump has a table %q this database lacks", l.Table)
			}
			table, ncols = l.Table, len(l.Columns)
			qc := make([]string, ncols)
			ph := make([]string, ncols)
			for i, c := range l.Columns {
				qc[i], ph[i] = quoteIdent(c), "?"
			}
			insert = s.bind(`INSERT INTO ` + quoteIdent(table) + ` (` + strings.Join(qc, ", ") + `) VALUES (` + strings.Join(ph, ", ") + `)`)
			sum.Tables[table] = 0
		case l.Row != nil:
			if table == "" || len(l.Row) != ncols {
				return sum, errors.New("import: the dump is damaged: a row outside a table or of the wrong width")
			}
			args := make([]any, ncols)
			for i, v := range l.Row {
				if args[i], err = loadValue(v); err != nil {
					return sum, fmt.Errorf("import %s: %w", table, err)
				}
			}
			if _, err := tx.ExecContext(ctx, insert, args...); err != nil {
				return sum, fmt.Errorf("import %s row %d: %w", table, sum.Tables[table]+1, err)
			}
			sum.Tables[table]++
			sum.Rows++
		}
	}
	if !ended {
		return sum, errors.New("import: the dump is truncated (no trailer); nothing was imported")
	}
	if s.engine == EnginePostgres {
		if err := resetIdentities(ctx, tx); err != nil {
			return sum, fmt.Errorf("import: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return sum, fmt.Errorf("import: %w", unavailable(err))
	}
	return sum, nil
}

// resetIdentities moves every identity column's sequence past the imported
// values, so the next insert does not collide with them.
func resetIdentities(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, `SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema() AND is_identity = 'YES'`)
	if err != nil {
		return err
	}
	var cols [][2]string
	for rows.Next() {
		var t, c string
		if err := rows.Scan(&t, &c); err != nil {
			rows.Close()
			return err
		}
		cols = append(cols, [2]string{t, c})
	}
	rows.Close()
	for _, tc := range cols {
		q := fmt.Sprintf(`SELECT setval(pg_get_serial_sequence($1, $2), coalesce((SELECT max(%s) FROM %s), 0) + 1, false)`, quoteIdent(tc[1]), quoteIdent(tc[0]))
		if _, err := tx.ExecContext(ctx, q, tc[0], tc[1]); err != nil {
			return fmt.Errorf("reset the sequence of %s.%s: %w", tc[0], tc[1], err)
		}
	}
	return nil
}
