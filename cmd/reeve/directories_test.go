package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDirectoryCommands(t *testing.T) {
	h := newHome(t)
	if r := h.run("list"); r.code != 3 || !strings.Contains(r.stderr, "no daemon is running") {
		t.Fatalf("list without a daemon: exit %d %q", r.code, r.stderr)
	}
	h.start()

	work := t.TempDir()
	r := h.must("add", work)
	id := strings.TrimSpace(r.stdout)
	if id == "" || !strings.Contains(r.stderr, "registered") {
		t.Fatalf("add: %q %q", r.stdout, r.stderr)
	}
	// A relative path is resolved against the caller's directory, and the
	// same directory again is not a second registration.
	rel, _ := filepath.Rel(mustGetwd(t), work)
	r = h.must("add", rel, "--json")
	var again struct {
		Directory struct{ ID, Path string }
		Created   bool
	}
	if err := json.Unmarshal([]byte(r.stdout), &again); err != nil || again.Created || again.Directory.ID != id {
		t.Fatalf("re-add: %v %s", err, r.stdout)
	}

	r = h.must("list", "--json")
	var listing struct {
		Directories    []struct{ ID, Path string }
		ActiveSessions int `json:"active_sessions"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &listing); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, d := range listing.Directories {
		found = found || d.ID == id
	}
	if !found {
		t.Fatalf("list does not show %s: %s", id, r.stdout)
	}
	if r := h.must("list"); !strings.Contains(r.stdout, work) {
		t.Fatalf("human list: %q", r.stdout)
	}

	// A directory that does not exist is not found (4); a file is not a
	// directory (2).
	for bad, code := range map[string]int{filepath.Join(work, "missing"): 4, writeFile(t, work, "f.txt"): 2} {
		if r := h.run("add", bad); r.code != code {
			t.Errorf("add %s: exit %d %q, want %d", bad, r.code, r.stderr, code)
		}
	}
	if r := h.run("add"); r.code != 2 {
		t.Errorf("add without PATH: exit %d", r.code)
	}

	h.must("remove", work)
	if r := h.run("remove", work); r.code != 4 || !strings.Contains(r.stderr, "not a registered directory") {
		t.Fatalf("remove twice: exit %d %q", r.code, r.stderr)
	}
}

func mustGetwd(t *testing.T) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

func writeFile(t *testing.T, dir, name string) string {
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
