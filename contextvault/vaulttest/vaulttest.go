// Package vaulttest sets up context-vault devices against a real server
// for tests: each device is a home of its own with a machine install (a
// real issue token) of a real user.
package vaulttest

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/contextvault"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
)

// Device is one device of a user.
type Device struct {
	*contextvault.Vault
	Home    string
	Install sdk.Install
	Token   string
	Client  *sdk.ContextClient
}

// NewDevice registers a machine for the user (who must be a workspace
// admin, as approving a pairing is) and opens a vault in a fresh home.
func NewDevice(t testing.TB, srv *servertest.Server, u servertest.User, name string) *Device {
	t.Helper()
	home := filepath.Join(t.TempDir(), name)
	return OpenDevice(t, srv, u, name, home, "")
}

// OpenDevice is NewDevice with a chosen home and key store.
func OpenDevice(t testing.TB, srv *servertest.Server, u servertest.User, name, home, keyStore string) *Device {
	t.Helper()
	in, err := u.Client.CreateInstall(context.Background(), u.Workspace, name)
	if err != nil {
		t.Fatalf("create install %s: %v", name, err)
	}
	cc := &sdk.ContextClient{Client: &sdk.Client{BaseURL: srv.URL, Token: in.IssueToken, HTTP: &http.Client{Timeout: 60 * time.Second}}, WorkspaceID: u.Workspace}
	var log io.Writer = io.Discard
	if testing.Verbose() {
		log = prefixed{t: t, name: name}
	}
	v, err := contextvault.Open(contextvault.Options{Home: home, KeyStore: keyStore, Server: cc, ScryptWorkFactor: 10, Log: log})
	if err != nil {
		t.Fatalf("open vault %s: %v", name, err)
	}
	t.Cleanup(func() { v.Close() })
	return &Device{Vault: v, Home: home, Install: in, Token: in.IssueToken, Client: cc}
}

type prefixed struct {
	t    testing.TB
	name string
}

func (p prefixed) Write(b []byte) (int, error) {
	p.t.Logf("%s: %s", p.name, strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// ServerFiles reads the server's database files (the database and its
// write-ahead log), to look for what must not be there.
func ServerFiles(t testing.TB, srv *servertest.Server) []byte {
	t.Helper()
	var all []byte
	entries, err := os.ReadDir(srv.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(srv.DataDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	return all
}
