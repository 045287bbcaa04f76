// Package goproxytest serves modules the way the Go toolchain expects, for
// tests with no network: a GOPROXY=file:// directory in the module proxy
// protocol's layout, and a checksum database (GOSUMDB) with its own signing
// key over HTTP on loopback.
package goproxytest

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/sumdb"
	"golang.org/x/mod/sumdb/dirhash"
	"golang.org/x/mod/sumdb/note"
	modzip "golang.org/x/mod/zip"
)

// Fixture is a module proxy directory and a checksum database.
type Fixture struct {
	t     *testing.T
	Dir   string // the proxy directory
	SumDB string // the GOSUMDB value naming the database
	mu    sync.Mutex
	sums  map[string]string // "path@version" -> go.sum lines
}

// New starts the checksum database; both are removed when the test ends.
func New(t *testing.T) *Fixture {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, "sum.reeve.test")
	if err != nil {
		t.Fatal(err)
	}
	f := &Fixture{t: t, Dir: t.TempDir(), sums: map[string]string{}}
	ts := sumdb.NewTestServer(skey, func(path, vers string) ([]byte, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		s, ok := f.sums[path+"@"+vers]
		if !ok {
			return nil, fmt.Errorf("no such module %s@%s", path, vers)
		}
		return []byte(s), nil
	})
	srv := httptest.NewServer(sumdb.NewServer(ts))
	t.Cleanup(srv.Close)
	f.SumDB = vkey + " " + srv.URL
	return f
}

// Proxy is the GOPROXY value of the directory.
func (f *Fixture) Proxy() string { return "file://" + filepath.ToSlash(f.Dir) }

// Publish writes version of the module (files by path, go.mod included)
// into the proxy and records its hashes in the checksum database; the
// version becomes @latest.
func (f *Fixture) Publish(mod, version string, files map[string]string) {
	f.t.Helper()
	zipData, modData := f.build(mod, version, files)
	h1, err := hashZip(zipData)
	if err != nil {
		f.t.Fatal(err)
	}
	modHash, err := dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(modData)), nil
	})
	if err != nil {
		f.t.Fatal(err)
	}
	f.mu.Lock()
	f.sums[mod+"@"+version] = fmt.Sprintf("%s %s %s\n%s %s/go.mod %s\n", mod, version, h1, mod, version, modHash)
	f.mu.Unlock()
	f.write(mod, version, zipData, modData)
}

// Tamper replaces the zip of a published version with other files, as a
// compromised proxy would; the checksum database keeps the true hash.
func (f *Fixture) Tamper(mod, version string, files map[string]string) {
	f.t.Helper()
	zipData, modData := f.build(mod, version, files)
	f.write(mod, version, zipData, modData)
}

func (f *Fixture) build(mod, version string, files map[string]string) (zipData, modData []byte) {
	f.t.Helper()
	src := f.t.TempDir()
	for p, c := range files {
		full := filepath.Join(src, filepath.FromSlash(p))
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			f.t.Fatal(err)
		}
	}
	var zb bytes.Buffer
	if err := modzip.CreateFromDir(&zb, module.Version{Path: mod, Version: version}, src); err != nil {
		f.t.Fatal(err)
	}
	return zb.Bytes(), []byte(files["go.mod"])
}

func (f *Fixture) write(mod, version string, zipData, modData []byte) {
	f.t.Helper()
	esc, _ := module.EscapePath(mod)
	ev, _ := module.EscapeVersion(version)
	dir := filepath.Join(f.Dir, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	info, _ := json.Marshal(map[string]string{"Version": version, "Time": time.Now().UTC().Format(time.RFC3339)})
	for name, data := range map[string][]byte{ev + ".info": info, ev + ".mod": modData, ev + ".zip": zipData} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			f.t.Fatal(err)
		}
	}
	list, _ := os.ReadFile(filepath.Join(dir, "list"))
	if !strings.Contains(string(list), version+"\n") {
		os.WriteFile(filepath.Join(dir, "list"), append(list, version+"\n"...), 0o644)
	}
	os.WriteFile(filepath.Join(f.Dir, filepath.FromSlash(esc), "@latest"), info, 0o644)
}

func hashZip(data []byte) (string, error) {
	tmp, err := os.CreateTemp("", "modzip-*.zip")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	tmp.Write(data)
	tmp.Close()
	return dirhash.HashZip(tmp.Name(), dirhash.Hash1)
}
