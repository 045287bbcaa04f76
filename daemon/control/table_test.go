package control

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"reeve.dev/reeve/daemon/wire"
)

// eventTypes are the frames the daemon sends outside acks. Every other
// Type* constant of daemon/wire is a request and must be in the table. A
// new constant must be classified here or given a table entry.
var eventTypes = []string{
	wire.TypeHello, wire.TypeAck,
	wire.TypeSessionStarted, wire.TypeSessionUpdate, wire.TypeSessionUpdates, wire.TypeSessionEnded, wire.TypeDiscoveredSession,
	wire.TypeDaemonStopping,
	wire.TypeHookPermissionRequest, wire.TypeHookPermissionResolved,
}

// fullTable is the table with every optional part present.
func fullTable() map[string]entry {
	return newWSServer(Options{Sessions: &fakeSessions{}, Permissions: fakePermissions{}, Worktrees: fakeWorktrees{}}).table
}

// wireTypes reads daemon/wire's Type* constants from its source: name to
// value.
func wireTypes(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	out := map[string]string{}
	files, _ := filepath.Glob(filepath.Join("..", "wire", "*.go"))
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if !strings.HasPrefix(n.Name, "Type") || i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						out[n.Name], _ = strconv.Unquote(lit.Value)
					}
				}
			}
		}
	}
	if len(out) < 10 {
		t.Fatalf("found only %d frame types in daemon/wire", len(out))
	}
	return out
}

// Every request type of the protocol has exactly one entry in the table,
// and the table answers nothing that is not a request type of daemon/wire.
func TestTableCoversEveryRequestType(t *testing.T) {
	table := fullTable()
	values := map[string]bool{}
	for name, v := range wireTypes(t) {
		values[v] = true
		if _, ok := table[v]; !ok && !slices.Contains(eventTypes, v) {
			t.Errorf("wire.%s (%q) is neither in the dispatch table nor a known event type", name, v)
		}
		if _, ok := table[v]; ok && slices.Contains(eventTypes, v) {
			t.Errorf("wire.%s (%q) is an event type, yet the table answers it", name, v)
		}
	}
	for typ := range table {
		if !values[typ] {
			t.Errorf("the table answers %q, which daemon/wire does not define", typ)
		}
	}
}

// requestRefs finds, in one Go file, the places that name a request type:
// a wire.Type* constant of a request, or the type's string in a case
// clause or a comparison.
func requestRefs(fset *token.FileSet, file *ast.File, names, values map[string]bool) []string {
	wireName := ""
	for _, imp := range file.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "reeve.dev/reeve/daemon/wire" {
			wireName = "wire"
			if imp.Name != nil {
				wireName = imp.Name.Name
			}
		}
	}
	var refs []string
	isRequestLit := func(e ast.Expr) bool {
		lit, ok := e.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return false
		}
		v, _ := strconv.Unquote(lit.Value)
		return values[v]
	}
	ast.Inspect(file, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			if id, ok := n.X.(*ast.Ident); ok && wireName != "" && id.Name == wireName && names[n.Sel.Name] {
				refs = append(refs, fset.Position(n.Pos()).String()+": wire."+n.Sel.Name)
			}
		case *ast.CaseClause:
			for _, e := range n.List {
				if isRequestLit(e) {
					refs = append(refs, fset.Position(e.Pos()).String()+": case "+e.(*ast.BasicLit).Value)
				}
			}
		case *ast.BinaryExpr:
			if (n.Op == token.EQL || n.Op == token.NEQ) && (isRequestLit(n.X) || isRequestLit(n.Y)) {
				refs = append(refs, fset.Position(n.Pos()).String()+": comparison with a request type")
			}
		}
		return true
	})
	return refs
}

func requestTypeSets(t *testing.T) (names, values map[string]bool) {
	table := fullTable()
	names, values = map[string]bool{}, map[string]bool{}
	for name, v := range wireTypes(t) {
		if _, ok := table[v]; ok {
			names[name], values[v] = true, true
		}
	}
	return names, values
}

// No code of the daemon's side handles a request type outside the table:
// outside table.go, nothing names a request type's constant or compares a
// frame's type with one. Clients (which send requests) are exempt.
func TestNoRequestTypeHandledOutsideTheTable(t *testing.T) {
	names, values := requestTypeSets(t)
	root := filepath.Join("..", "..")
	sides := []string{"daemon", "agents", "hookbridge", "worker"}
	exempt := []string{
		filepath.Join("daemon", "wire"), filepath.Join("daemon", "wireclient"), filepath.Join("daemon", "controlclient"),
	}
	fset := token.NewFileSet()
	scanned := 0
	for _, side := range sides {
		err := filepath.WalkDir(filepath.Join(root, side), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) {
					return filepath.SkipDir
				}
				return err
			}
			rel, _ := filepath.Rel(root, path)
			if d.IsDir() {
				if slices.Contains(exempt, rel) || d.Name() == "testdata" {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || rel == filepath.Join("daemon", "control", "table.go") {
				return nil
			}
			file, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			scanned++
			for _, r := range requestRefs(fset, file, names, values) {
				t.Errorf("a request type is handled outside daemon/control/table.go: %s", r)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if scanned < 20 {
		t.Fatalf("scanned only %d files", scanned)
	}
}

// The scan catches the forms a handler outside the table would take.
func TestScanCatchesHandlersOutsideTheTable(t *testing.T) {
	names, values := requestTypeSets(t)
	for _, src := range []string{
		`package x; import "reeve.dev/reeve/daemon/wire"; func f(t string) { switch t { case wire.TypeKill: } }`,
		`package x; import w "reeve.dev/reeve/daemon/wire"; var m = map[string]int{w.TypeRollback: 1}`,
		`package x; func f(t string) { switch t { case "squash-merge": } }`,
		`package x; func f(t string) bool { return t == "respond-permission" }`,
	} {
		fset := token.NewFileSet()
		file, err := parser.ParseFile(fset, "x.go", src, 0)
		if err != nil {
			t.Fatal(err)
		}
		if refs := requestRefs(fset, file, names, values); len(refs) == 0 {
			t.Errorf("missed: %s", src)
		}
	}
	fset := token.NewFileSet()
	file, _ := parser.ParseFile(fset, "ok.go", `package x; import "reeve.dev/reeve/daemon/wire"; var _ = wire.TypeSessionUpdate; func f(t string) { switch t { case "tool-call": } }`, 0)
	if refs := requestRefs(fset, file, names, values); len(refs) != 0 {
		t.Errorf("an event type counted as a request: %v", refs)
	}
}

// fakeWorktrees answers every worktree request with an empty result.
type fakeWorktrees struct{}

func (fakeWorktrees) WorktreeList(context.Context, wire.WorktreeListRequest) (wire.WorktreeList, error) {
	return wire.WorktreeList{}, nil
}
func (fakeWorktrees) WorktreeDiff(context.Context, wire.WorktreeDiffRequest) (wire.WorktreeDiff, error) {
	return wire.WorktreeDiff{}, nil
}
func (fakeWorktrees) WorktreeSummary(context.Context, wire.WorktreeSummaryRequest) (wire.WorktreeSummary, error) {
	return wire.WorktreeSummary{}, nil
}
func (fakeWorktrees) Rollback(context.Context, wire.RollbackRequest) (wire.RollbackResult, error) {
	return wire.RollbackResult{}, nil
}
func (fakeWorktrees) BranchRetry(context.Context, wire.BranchRetryRequest) (wire.BranchRetryResult, error) {
	return wire.BranchRetryResult{}, nil
}
func (fakeWorktrees) SquashMerge(context.Context, wire.SquashMergeRequest) (wire.SquashMergeResult, error) {
	return wire.SquashMergeResult{}, nil
}
func (fakeWorktrees) WorktreeRemove(context.Context, wire.WorktreeRemoveRequest) (wire.WorktreeRemoveResult, error) {
	return wire.WorktreeRemoveResult{}, nil
}
