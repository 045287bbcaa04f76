package host

import (
	"context"
	"io"

	"reeve.dev/reeve/server/store"
)

// The operator's database commands: `reeve server migrate`, `export` and
// `import`. They work on the database directly, with or without running
// servers.

// openDB opens the store the options select, migrating it.
func openDB(ctx context.Context, o Options) (*store.DB, error) {
	if o.DatabaseURL == "" {
		if err := o.prepareDataDir(); err != nil {
			return nil, err
		}
	}
	u, err := o.databaseURL()
	if err != nil {
		return nil, err
	}
	return store.Open(ctx, u)
}

// Migrate applies the migrations the database lacks and says what it did.
func Migrate(ctx context.Context, o Options) (store.Migration, error) {
	db, err := openDB(ctx, o)
	if err != nil {
		return store.Migration{}, err
	}
	defer db.Close()
	return db.Migration(), nil
}

// Export writes the database's data to w (see store.DB.Export).
func Export(ctx context.Context, o Options, w io.Writer) (store.DumpSummary, error) {
	db, err := openDB(ctx, o)
	if err != nil {
		return store.DumpSummary{}, err
	}
	defer db.Close()
	return db.Export(ctx, w)
}

// Import loads a dump into the database, which must be empty.
func Import(ctx context.Context, o Options, r io.Reader) (store.DumpSummary, error) {
	db, err := openDB(ctx, o)
	if err != nil {
		return store.DumpSummary{}, err
	}
	defer db.Close()
	return db.Import(ctx, r)
}
