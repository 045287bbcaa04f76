package control

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/sdk/accesstoken"
)

// dirSessions answers every session as one running in dir.
type dirSessions struct {
	*fakeSessions
	dir string
}

func (d dirSessions) Session(_ context.Context, id string) (wire.SessionInfo, error) {
	return wire.SessionInfo{ID: id, Directory: d.dir}, nil
}

type oneDirectory struct{ dir string }

func (o oneDirectory) AddDirectory(context.Context, string) (store.Directory, bool, error) {
	return store.Directory{}, false, nil
}
func (o oneDirectory) ListDirectories(context.Context) ([]store.Directory, error) {
	return []store.Directory{{ID: "d1", Path: o.dir}}, nil
}
func (o oneDirectory) Directory(context.Context, string) (store.Directory, error) {
	return store.Directory{ID: "d1", Path: o.dir}, nil
}
func (o oneDirectory) RemoveDirectory(context.Context, string) error { return nil }

// The checkout's .reeve/access.yaml caps what the control plane's session
// roles allow, and decides who may launch into it; a broken file refuses.
func TestAccessFileCapsSessionRoles(t *testing.T) {
	dir, _ := filepath.EvalSymlinks(t.TempDir())
	os.MkdirAll(filepath.Join(dir, ".reeve"), 0o755)
	write := func(s string) {
		if err := os.WriteFile(filepath.Join(dir, ".reeve", "access.yaml"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("version: 1\ndefault_role: viewer\nmembers:\n  - user: Alice@Example.com\n    role: approver\n  - team: grp1\n    role: operator\n")
	s := newWSServer(Options{Sessions: dirSessions{&fakeSessions{}, dir}, Directories: oneDirectory{dir}})
	conn := func(email string, teams []string, acl string) *wsConn {
		c := &wsConn{srv: s, ctx: context.Background(), access: &connAccess{}}
		c.access.claims = &accesstoken.Claims{Email: email, Teams: teams, DefaultSessionRole: acl}
		return c
	}
	steer, mode := need(sdk.SessionSteerer, scopeSession), need(sdk.SessionOwner, scopeSession)
	launch := need(sdk.SessionSteerer, scopeDirectory)
	check := func(name string, c *wsConn, p permission, want bool, why string) {
		t.Helper()
		_, err := c.allowed(name, p, "s1", "", dir)
		if want && err != nil {
			t.Errorf("%s: refused: %v", name, err)
		}
		if !want && (err == nil || !strings.Contains(err.Error(), why)) {
			t.Errorf("%s: %v, want a refusal saying %q", name, err, why)
		}
	}
	// A workspace admin (owner of every session) the file does not list is
	// a viewer of this project.
	admin := conn("bob@example.com", nil, sdk.SessionOwner)
	check("admin prompt", admin, steer, false, "capped by the project's .reeve/access.yaml")
	check("admin launch", admin, launch, false, "operator")
	// Alice is an approver by the file (matched case-insensitively) and an
	// owner by the ACL: she may steer and decide, not change the mode.
	alice := conn("alice@example.com", nil, sdk.SessionOwner)
	check("alice prompt", alice, steer, true, "")
	check("alice approve", alice, need(sdk.SessionApprover, scopeSession), true, "")
	check("alice mode", alice, mode, false, "capped")
	check("alice launch", alice, launch, true, "")
	// The file never raises: a team operator whose ACL role is viewer
	// stays a viewer of the session, yet may launch into the project.
	carol := conn("carol@example.com", []string{"grp1"}, sdk.SessionViewer)
	check("carol prompt", carol, steer, false, "you are viewer")
	check("carol launch", carol, launch, true, "")
	// A broken file refuses everything, with its problem.
	write("version: 1\nmembers: nope\n")
	check("broken", alice, need(sdk.SessionViewer, scopeSession), false, "not valid")
	check("broken launch", alice, launch, false, "not valid")
	// Without a file, the ACL decides, and only owners and admins launch.
	os.Remove(filepath.Join(dir, ".reeve", "access.yaml"))
	check("no file, admin mode", admin, mode, true, "")
	check("no file, member launch", carol, launch, false, "owner or admin")
	check("no file, admin launch", admin, launch, true, "")
}
