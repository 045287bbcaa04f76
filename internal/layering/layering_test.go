package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "reeve.dev/reeve"

// deps lists the non-standard packages pkg depends on, transitively. A
// package that does not exist yet yields ok=false.
func deps(t *testing.T, pkg string) (list []string, ok bool) {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "matched no packages") || strings.Contains(string(out), "cannot find") || strings.Contains(string(out), "no required module provides") || strings.Contains(string(out), "no Go files") {
			return nil, false
		}
		t.Fatalf("go list %s: %v\n%s", pkg, err, out)
	}
	for _, l := range strings.Fields(string(out)) {
		if l != pkg {
			list = append(list, l)
		}
	}
	return list, true
}

// packages lists the module's packages under pattern (module-relative).
func packages(t *testing.T, pattern string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", module+"/"+pattern).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", pattern, err, out)
	}
	return strings.Fields(string(out))
}

// The wire formats are leaves: they import only the standard library (and
// a few JSON/ID helpers), so any program — the daemon, the server, the
// worker, a test, a third-party client — can speak them. The protocol's
// one client imports nothing but the standard library and the protocol.
func TestLeafPackages(t *testing.T) {
	allowed := []string{"github.com/oklog/ulid/v2"}
	for pkg, extra := range map[string][]string{
		module + "/daemon/wire":            nil, // the control protocol
		module + "/server/sdk":             nil, // REST bodies
		module + "/server/relay/relaywire": nil, // the relay envelope
		module + "/daemon/wireclient":      {module + "/daemon/wire"},
	} {
		list, ok := deps(t, pkg)
		if !ok {
			continue
		}
		for _, d := range list {
			if !hasAnyPrefix(d, allowed) && !slices.Contains(extra, d) {
				t.Errorf("%s is a leaf but depends on %s", pkg, d)
			}
		}
	}
}

// The command layer reaches the daemon worker and the server's insides
// only through wiring done in main, never by import.
func TestCLIStaysThin(t *testing.T) {
	list, _ := deps(t, module+"/cli")
	forbidden := []string{module + "/daemon/runtime", module + "/daemon/control", module + "/daemon/store", module + "/agents",
		module + "/server/api", module + "/server/relay", module + "/server/host", module + "/server/store", module + "/server/web"}
	leaves := []string{module + "/server/relay/relaywire"}
	for _, d := range list {
		if hasAnyPrefix(d, forbidden) && !slices.Contains(leaves, d) {
			t.Errorf("cli depends on %s", d)
		}
	}
}

// The hosted server never links daemon, agent or hook-bridge code, except
// the protocol leaves: daemon/wire and its client daemon/wireclient.
func TestServerIndependentOfDaemon(t *testing.T) {
	forbidden := []string{module + "/daemon", module + "/agents", module + "/hookbridge"}
	leaves := []string{module + "/daemon/wire", module + "/daemon/wireclient"}
	for _, pkg := range packages(t, "server/...") {
		list, _ := deps(t, pkg)
		for _, d := range list {
			if hasAnyPrefix(d, forbidden) && !slices.Contains(leaves, d) {
				t.Errorf("%s depends on %s", pkg, d)
			}
		}
	}
}

// The daemon never links the relay server or the control plane's
// insides: of the server tree, only the SDK and the relay envelope.
func TestDaemonIndependentOfServer(t *testing.T) {
	allowed := []string{module + "/server/sdk", module + "/server/relay/relaywire"}
	for _, pkg := range packages(t, "daemon/...") {
		list, _ := deps(t, pkg)
		for _, d := range list {
			if hasAnyPrefix(d, []string{module + "/server"}) && !hasAnyPrefix(d, allowed) {
				t.Errorf("%s depends on %s", pkg, d)
			}
		}
	}
}

// The control protocol has one client: the local one and the remote one
// are transports of daemon/wireclient.
func TestOneProtocolClient(t *testing.T) {
	for _, pkg := range []string{module + "/daemon/controlclient", module + "/server/sdk/remote"} {
		list, _ := deps(t, pkg)
		if !slices.Contains(list, module+"/daemon/wireclient") {
			t.Errorf("%s does not use daemon/wireclient", pkg)
		}
	}
	// Reading acks is what a client does; only the daemon, which writes
	// them, and the one client name the type.
	refs := goFiles(t, func(rel string, f *ast.File, fset *token.FileSet) []string {
		dir := filepath.ToSlash(filepath.Dir(rel))
		if dir == "daemon/wire" || dir == "daemon/wireclient" || dir == "daemon/control" {
			return nil
		}
		var out []string
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Ack" {
				if id, ok := sel.X.(*ast.Ident); ok && importPath(f, id.Name) == module+"/daemon/wire" {
					out = append(out, fset.Position(sel.Pos()).String())
				}
			}
			return true
		})
		return out
	})
	for _, r := range refs {
		t.Errorf("a second client of the control protocol reads acks at %s", r)
	}
}

// The protocol is defined once, in daemon/wire: nothing else declares a
// Type constant naming one of its frames, or a hello.
func TestProtocolDefinedOnce(t *testing.T) {
	types := map[string]bool{}
	goFiles(t, func(rel string, f *ast.File, _ *token.FileSet) []string {
		if filepath.ToSlash(filepath.Dir(rel)) == "daemon/wire" {
			for name, v := range stringConsts(f) {
				if strings.HasPrefix(name, "Type") {
					types[v] = true
				}
			}
		}
		return nil
	})
	if len(types) < 10 {
		t.Fatalf("found %d frame types in daemon/wire", len(types))
	}
	refs := goFiles(t, func(rel string, f *ast.File, fset *token.FileSet) []string {
		if filepath.ToSlash(filepath.Dir(rel)) == "daemon/wire" {
			return nil
		}
		var out []string
		for name, v := range stringConsts(f) {
			if strings.HasPrefix(name, "Type") && types[v] {
				out = append(out, rel+": const "+name+" = "+strconv.Quote(v))
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if fl, ok := n.(*ast.Field); ok && fl.Tag != nil && strings.Contains(fl.Tag.Value, `json:"protocol_version`) {
				out = append(out, fset.Position(fl.Pos()).String()+": a hello")
			}
			return true
		})
		return out
	})
	for _, r := range refs {
		t.Errorf("the control protocol is restated outside daemon/wire: %s", r)
	}
}

// goFiles parses every non-test Go file of the module (but .cache and
// testdata) and gathers what check reports.
func goFiles(t *testing.T, check func(rel string, f *ast.File, fset *token.FileSet) []string) []string {
	t.Helper()
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == ".cache" || n == "testdata" || n == "node_modules" || (strings.HasPrefix(n, ".") && path != root) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		out = append(out, check(rel, f, fset)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func stringConsts(f *ast.File) map[string]string {
	out := map[string]string{}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if i < len(vs.Values) {
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						out[n.Name], _ = strconv.Unquote(lit.Value)
					}
				}
			}
		}
	}
	return out
}

// importPath is the path of the package a file imports as name.
func importPath(f *ast.File, name string) string {
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		n := p[strings.LastIndex(p, "/")+1:]
		if imp.Name != nil {
			n = imp.Name.Name
		}
		if n == name {
			return p
		}
	}
	return ""
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if s == p || strings.HasPrefix(s, p+"/") {
			return true
		}
	}
	return false
}

// The team worker runs agents only through the local daemon, as `reeve
// run` does, and reaches the control plane only through the SDK: it links
// the daemon's clients and the wire leaves, never the daemon's runtime,
// the agents themselves, or the server's insides.
func TestWorkerThroughDaemonAndSDK(t *testing.T) {
	allowed := []string{module + "/worker", module + "/daemon/controlclient", module + "/daemon/wireclient", module + "/daemon/wire",
		module + "/daemon/home", module + "/server/sdk", module + "/internal"}
	for _, pkg := range packages(t, "worker/...") {
		if strings.HasSuffix(pkg, "test") {
			continue // test helpers may start a server
		}
		list, _ := deps(t, pkg)
		for _, d := range list {
			if strings.HasPrefix(d, module+"/") && !hasAnyPrefix(d, allowed) {
				t.Errorf("%s depends on %s", pkg, d)
			}
		}
	}
}
