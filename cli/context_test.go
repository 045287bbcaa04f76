package cli

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
)

// pairedHome is a daemon home paired with srv as a machine of u.
func pairedHome(t *testing.T, srv *servertest.Server, u servertest.User, name string) string {
	t.Helper()
	in, err := u.Client.CreateInstall(context.Background(), u.Workspace, name)
	if err != nil {
		t.Fatal(err)
	}
	h := filepath.Join(t.TempDir(), name)
	d := home.Dir(h)
	if err := d.Prepare(); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteRelayCredentials(home.RelayCredentials{InstallID: in.ID, WorkspaceID: u.Workspace, IssueToken: in.IssueToken, ServerURL: srv.URL, PairedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	return h
}

type run struct {
	code     int
	out, err string
}

func ctxRun(t *testing.T, h, stdin string, args ...string) run {
	t.Helper()
	env, out, errb := testEnv()
	env.In = strings.NewReader(stdin)
	code := Execute(context.Background(), env, append([]string{"--home", h, "context"}, args...))
	return run{code, out.String(), errb.String()}
}

func (r run) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(r.out), v); err != nil {
		t.Fatalf("decode %q: %v (stderr %s)", r.out, err, r.err)
	}
}

// The context commands through cobra, against a real server: init, add
// from stdin, resolve, enrollment of a second machine, and each bad input
// refused with its exit code and nothing lost.
func TestContextCommands(t *testing.T) {
	srv := servertest.Start(t, servertest.Options{})
	alice := srv.NewUser("alice@example.com")
	h1 := pairedHome(t, srv, alice, "laptop")

	if r := ctxRun(t, h1, "", "init", "--key-store", "vault"); r.code != ExitUsage {
		t.Fatalf("init with a bad --key-store: %+v", r)
	}
	r := ctxRun(t, h1, "", "init", "--vault", "team", "--name", "laptop", "--json")
	if r.code != ExitOK {
		t.Fatalf("init: %+v", r)
	}
	var ini struct {
		Device      sdk.ContextDevice `json:"device"`
		Fingerprint string            `json:"fingerprint"`
		KeyStore    string            `json:"key_store"`
	}
	r.json(t, &ini)
	if ini.Device.State != sdk.DeviceActive || ini.KeyStore != "file" {
		t.Fatalf("init = %+v", ini)
	}
	if r := ctxRun(t, h1, "We deploy with `make release`.\n", "add", "--title", "Releases", "--use-when", "always", "--tag", "ops"); r.code != ExitOK || !strings.Contains(r.out, "pushed") {
		t.Fatalf("add from stdin: %+v", r)
	}
	if r := ctxRun(t, h1, "", "add", "--use-when", "always"); r.code != ExitUsage {
		t.Fatalf("add without a title: %+v", r)
	}
	r = ctxRun(t, h1, "", "resolve", t.TempDir(), "--task", "cut a release", "--json")
	var res struct {
		Entries []struct{ Title, Body string }
	}
	r.json(t, &res)
	if r.code != ExitOK || len(res.Entries) != 1 || res.Entries[0].Title != "Releases" {
		t.Fatalf("resolve = %+v %+v", r, res)
	}
	if r := ctxRun(t, h1, "", "resolve", t.TempDir(), "--task", "cut a release", "--markdown"); !strings.Contains(r.out, "## Releases") || !strings.Contains(r.out, "make release") {
		t.Fatalf("resolve --markdown: %+v", r)
	}

	// A second machine: pending, refused approval on a mismatched
	// fingerprint, then approved and accepted.
	h2 := pairedHome(t, srv, alice, "desktop")
	r = ctxRun(t, h2, "", "init", "--name", "desktop", "--json")
	var ini2 struct {
		Device      sdk.ContextDevice `json:"device"`
		Fingerprint string            `json:"fingerprint"`
	}
	r.json(t, &ini2)
	if ini2.Device.State != sdk.DevicePending {
		t.Fatalf("second init = %+v", ini2)
	}
	if r := ctxRun(t, h2, "", "device-enroll-accept"); r.code != ExitConflict || !strings.Contains(r.err, "still pending") {
		t.Fatalf("accept before approval: %+v", r)
	}
	if r := ctxRun(t, h1, "", "device-enroll-approve", ini2.Device.ID, "--fingerprint", "ABCD-0000-0000-0000-0000-0000-0000-0000"); r.code != ExitDenied || !strings.Contains(r.err, "fingerprint mismatch") {
		t.Fatalf("approval with a mismatched fingerprint: %+v", r)
	}
	if r := ctxRun(t, h1, "", "device-enrollments", "--pending", "--json"); !strings.Contains(r.out, ini2.Device.ID) {
		t.Fatalf("the refused approval changed the enrollment: %+v", r)
	}
	if r := ctxRun(t, h1, "", "device-enroll-approve", ini2.Device.ID, "--fingerprint", ini2.Fingerprint); r.code != ExitOK {
		t.Fatalf("approve: %+v", r)
	}
	if r := ctxRun(t, h2, "", "device-enroll-accept"); r.code != ExitOK || !strings.Contains(r.out, "active") {
		t.Fatalf("accept: %+v", r)
	}
	if r := ctxRun(t, h2, "", "sync-pull"); r.code != ExitOK {
		t.Fatalf("pull: %+v", r)
	}
	if r := ctxRun(t, h2, "", "status", "--json"); r.code != ExitOK || !strings.Contains(r.out, `"entries": 1`) {
		t.Fatalf("status on the second machine: %+v", r)
	}

	// Recovery: a wrong key is refused, nothing changes.
	if r := ctxRun(t, h1, "correct horse battery staple\n", "recovery-backup", "--recovery-key", "-"); r.code != ExitOK {
		t.Fatalf("backup: %+v", r)
	}
	h3 := pairedHome(t, srv, alice, "new-laptop")
	if r := ctxRun(t, h3, "", "recovery-restore", "--recovery-key", "wrong horse battery staple"); r.code != ExitDenied || !strings.Contains(r.err, "does not open") {
		t.Fatalf("restore with a wrong key: %+v", r)
	}
	if r := ctxRun(t, h3, "", "status", "--offline", "--json"); !strings.Contains(r.out, `"has_key": false`) {
		t.Fatalf("a refused restore left something: %+v", r)
	}

	// dev-reset-crypto refuses without --i-understand and keeps everything.
	if r := ctxRun(t, h1, "", "dev-reset-crypto"); r.code != ExitUsage || !strings.Contains(r.err, "--i-understand") {
		t.Fatalf("reset without confirmation: %+v", r)
	}
	if r := ctxRun(t, h1, "", "status", "--json"); !strings.Contains(r.out, `"has_key": true`) || !strings.Contains(r.out, `"entries": 1`) {
		t.Fatalf("after a refused reset: %+v", r)
	}
	// Unpaired homes are told to pair, that home (ctxRun passes --home).
	unpaired := t.TempDir()
	if r := ctxRun(t, unpaired, "", "init"); r.code != ExitUsage || !strings.Contains(r.err, "`reeve --home "+shellWord(unpaired)+" pair --server URL`") {
		t.Fatalf("init unpaired: %+v", r)
	}
	if r := ctxRun(t, h1, "", "dev-reset-crypto", "--i-understand", "--json"); r.code != ExitOK || !strings.Contains(r.out, "revoked device") {
		t.Fatalf("reset: %+v", r)
	}
}
