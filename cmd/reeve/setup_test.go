package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// setup --yes writes a valid config from the defaults and changes nothing
// when run again; --choose on a real terminal takes typed answers,
// re-asks after a bad one, and an interrupted --choose leaves the config
// as it was.
func TestSetup(t *testing.T) {
	h := newHome(t)
	h.env = append(os.Environ(), "PATH=/usr/bin:/bin") // no agent installed: shell
	cfg := h.file("config.yaml")

	var rep struct {
		ConfigFile    string `json:"config_file"`
		ConfigChanged bool   `json:"config_changed"`
		DefaultAgent  string `json:"default_agent"`
		Next          []string
	}
	if err := json.Unmarshal([]byte(h.must("setup", "--yes", "--json").stdout), &rep); err != nil || !rep.ConfigChanged || rep.ConfigFile != cfg || rep.DefaultAgent != "shell" {
		t.Fatalf("setup --yes: %+v %v", rep, err)
	}
	if !strings.Contains(strings.Join(rep.Next, "\n"), "reeve start") {
		t.Fatalf("next steps: %v", rep.Next)
	}
	if r := h.run("validate"); r.code != 0 {
		t.Fatalf("the written config does not validate: %s %s", r.stdout, r.stderr)
	}
	first, _ := os.ReadFile(cfg)
	fi, _ := os.Stat(cfg)
	if r := h.must("setup", "--yes"); !strings.Contains(r.stderr, "nothing changed") {
		t.Fatalf("second setup --yes: %s", r.stderr)
	}
	if again, _ := os.ReadFile(cfg); string(again) != string(first) {
		t.Fatal("setup --yes changed the config the second time")
	}
	if fi2, _ := os.Stat(cfg); !fi2.ModTime().Equal(fi.ModTime()) {
		t.Fatal("setup --yes rewrote an unchanged config")
	}

	// --choose on a terminal; a bad listen address is asked again.
	sock := filepath.Join(t.TempDir(), "d.sock")
	tm := h.onTerminal("setup", "--choose")
	tm.expect("Daemon home ["+h.dir+"]: ", 20*time.Second)
	tm.send("\r")
	tm.expect("Listen address", 10*time.Second)
	tm.send("not a port:x:y\r")
	tm.expect("Listen address (host:port, port, or unix socket path) [127.0.0.1:7070]: ", 10*time.Second)
	tm.send(sock + "\r")
	tm.expect("Default agent (shell) [shell]: ", 10*time.Second)
	tm.send("\r")
	tm.expect("Default mode", 10*time.Second)
	tm.send("bypass\r")
	tm.expect("Server to pair with", 10*time.Second)
	tm.send("https://reeve.example\r")
	tm.expect("Start the daemon automatically at login? (y/n) [n]: ", 10*time.Second)
	tm.send("n\r")
	if code := tm.exit(20 * time.Second); code != 0 {
		t.Fatalf("setup --choose: exit %d\n%s", code, tm.out.String())
	}
	if !strings.Contains(tm.out.String(), "reeve pair --server https://reeve.example") {
		t.Fatalf("next steps do not name the pairing:\n%s", tm.out.String())
	}
	chosen, _ := os.ReadFile(cfg)
	if !strings.Contains(string(chosen), "listen: "+sock) || !strings.Contains(string(chosen), "default_mode: bypass") {
		t.Fatalf("config after --choose:\n%s", chosen)
	}
	// The daemon starts with what was chosen.
	h.must("start")
	if st, _ := h.status(); st.Reachability.Address != sock {
		t.Fatalf("daemon listens on %s, want %s", st.Reachability.Address, sock)
	}
	h.must("stop")

	// Interrupted midway with Ctrl-C: nothing written.
	tm = h.onTerminal("setup", "--choose")
	tm.expect("Daemon home", 20*time.Second)
	tm.send("\r")
	tm.expect("Listen address", 10*time.Second)
	tm.send("127.0.0.1:9999\r")
	tm.expect("Default agent", 10*time.Second)
	tm.send("\x03")
	if code := tm.exit(20 * time.Second); code == 0 || !strings.Contains(tm.out.String(), "nothing was written") {
		t.Fatalf("interrupted setup: exit %d\n%s", code, tm.out.String())
	}
	if now, _ := os.ReadFile(cfg); string(now) != string(chosen) {
		t.Fatalf("an interrupted setup changed the config:\n%s", now)
	}

	if r := h.run("setup"); r.code != 2 {
		t.Fatalf("setup without --yes or --choose: exit %d", r.code)
	}
}
