package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"
)

// ServerDBRequest names the database of `reeve server migrate|export|import`.
type ServerDBRequest struct {
	DataDir, DatabaseURL string
}

// ServerMigration is what `reeve server migrate` did.
type ServerMigration struct {
	Engine  string   `json:"engine"`
	From    int      `json:"from"`
	To      int      `json:"to"`
	Applied []string `json:"applied"`
}

// ServerDumpSummary is what an export or import moved.
type ServerDumpSummary struct {
	Engine        string           `json:"engine"`
	SchemaVersion int              `json:"schema_version"`
	Tables        map[string]int64 `json:"tables"`
	Rows          int64            `json:"rows"`
}

type serverDBOptions struct {
	env         *Env
	dataDir     string
	databaseURL string
	file        string
	json        bool
}

func (o *serverDBOptions) request() ServerDBRequest {
	return ServerDBRequest{DataDir: o.dataDir, DatabaseURL: o.databaseURL}
}

func serverDBFlags(cmd *cobra.Command, e *Env, o *serverDBOptions) {
	f := cmd.Flags()
	f.StringVar(&o.dataDir, "data-dir", "", "data directory (default "+serverDataDir(e)+")")
	f.StringVar(&o.databaseURL, "database-url", "", "database URL: postgres://… or sqlite:PATH (overrides --data-dir)")
}

func newServerMigrateCmd(e *Env) *cobra.Command {
	o := &serverDBOptions{env: e}
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply the database migrations this reeve has and report the schema version",
		Long: "Applies the migrations the database lacks (each in a transaction; on PostgreSQL under an advisory lock, so it is safe beside\n" +
			"starting replicas) and prints the schema version. `reeve server` also migrates on start; this is the explicit step.\n" +
			"A database migrated by a newer reeve is refused.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServerMigrate(cmd.Context(), o) },
	}
	serverDBFlags(cmd, e, o)
	cmd.Flags().BoolVar(&o.json, "json", false, "print the result as JSON")
	return cmd
}

func runServerMigrate(ctx context.Context, o *serverDBOptions) error {
	if o.env.Programs.Server.Migrate == nil {
		return exitf(ExitFailure, "this build of reeve has no control plane")
	}
	m, err := o.env.Programs.Server.Migrate(ctx, o.request())
	if err != nil {
		return dbError(err)
	}
	if o.json {
		return writeJSON(o.env.Out, m)
	}
	if len(m.Applied) == 0 {
		_, err = fmt.Fprintf(o.env.Out, "%s schema version %d: up to date\n", m.Engine, m.To)
		return err
	}
	_, err = fmt.Fprintf(o.env.Out, "%s schema version %d (was %d): applied %s\n", m.Engine, m.To, m.From, strings.Join(m.Applied, ", "))
	return err
}

func newServerExportCmd(e *Env) *cobra.Command {
	o := &serverDBOptions{env: e}
	cmd := &cobra.Command{
		Use:   "export [--output FILE]",
		Short: "Write the server's data to a dump (stdout by default), to import into another database",
		Long: "Writes every row of the database, as of one snapshot, as a dump (JSON lines) on stdout or into --output (created 0600:\n" +
			"it holds token hashes and sealed secrets). With `reeve server import` it moves a SQLite server to PostgreSQL:\n" +
			"  reeve server export --data-dir DIR -o dump.jsonl\n" +
			"  reeve server import --database-url postgres://… -i dump.jsonl\n" +
			"Sealed secrets stay sealed: the new servers need the same master key.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServerExport(cmd.Context(), o) },
	}
	serverDBFlags(cmd, e, o)
	cmd.Flags().StringVarP(&o.file, "output", "o", "-", "file to write (- for stdout)")
	return cmd
}

func runServerExport(ctx context.Context, o *serverDBOptions) error {
	if o.env.Programs.Server.Export == nil {
		return exitf(ExitFailure, "this build of reeve has no control plane")
	}
	w := o.env.Out
	var f *os.File
	if o.file != "-" && o.file != "" {
		var err error
		f, err = os.OpenFile(o.file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return withExit(ExitUsage, fmt.Errorf("--output: %w", err))
		}
		w = f
	}
	sum, err := o.env.Programs.Server.Export(ctx, o.request(), w)
	if f != nil {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(o.file)
		}
	}
	if err != nil {
		return dbError(err)
	}
	fmt.Fprintf(o.env.Err, "exported %d rows of %d tables (%s, schema version %d)\n", sum.Rows, len(sum.Tables), sum.Engine, sum.SchemaVersion)
	return nil
}

func newServerImportCmd(e *Env) *cobra.Command {
	o := &serverDBOptions{env: e}
	cmd := &cobra.Command{
		Use:   "import [--input FILE]",
		Short: "Load a dump written by `reeve server export` into an empty database",
		Long: "Migrates the target database, then loads the dump (stdin by default) in one transaction: a damaged or truncated dump,\n" +
			"or a target that is not empty, imports nothing. Both sides must be at the same schema version (the same reeve).",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServerImport(cmd.Context(), o) },
	}
	serverDBFlags(cmd, e, o)
	cmd.Flags().StringVarP(&o.file, "input", "i", "-", "dump to read (- for stdin)")
	cmd.Flags().BoolVar(&o.json, "json", false, "print the summary as JSON")
	return cmd
}

func runServerImport(ctx context.Context, o *serverDBOptions) error {
	if o.env.Programs.Server.Import == nil {
		return exitf(ExitFailure, "this build of reeve has no control plane")
	}
	var r io.Reader = o.env.In
	if o.file != "-" && o.file != "" {
		f, err := os.Open(o.file)
		if err != nil {
			return withExit(ExitUsage, fmt.Errorf("--input: %w", err))
		}
		defer f.Close()
		r = f
	}
	sum, err := o.env.Programs.Server.Import(ctx, o.request(), r)
	if err != nil {
		if strings.Contains(err.Error(), "not empty") {
			return withExit(ExitConflict, err)
		}
		if strings.Contains(err.Error(), "import:") && !strings.Contains(err.Error(), "unavailable") {
			return withExit(ExitInvalid, err)
		}
		return dbError(err)
	}
	if o.json {
		return writeJSON(o.env.Out, sum)
	}
	names := make([]string, 0, len(sum.Tables))
	for t := range sum.Tables {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		fmt.Fprintf(o.env.Out, "%-20s %d\n", t, sum.Tables[t])
	}
	fmt.Fprintf(o.env.Err, "imported %d rows (from %s, schema version %d)\n", sum.Rows, sum.Engine, sum.SchemaVersion)
	return nil
}

// dbError gives database failures their exit codes: a bad URL is a usage
// error, a newer schema a conflict.
func dbError(err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "unsupported database url"), strings.Contains(msg, "cannot parse"):
		return withExit(ExitUsage, err)
	case strings.Contains(msg, "newer than this reeve"):
		return withExit(ExitConflict, err)
	}
	return err
}
