package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// reeve install writes the hook program copy, completions and man pages
// into the home, reports each file, and changes nothing the second time.
// The completion really completes in bash, and the man page renders.
func TestInstallRuntimeFiles(t *testing.T) {
	h := newHome(t)
	type file struct{ Kind, Path, Action, Detail string }
	var rep struct{ Files []file }
	if err := json.Unmarshal([]byte(h.must("install", "--json").stdout), &rep); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	var hook file
	for _, f := range rep.Files {
		kinds[f.Kind]++
		if f.Action != "written" {
			t.Errorf("first install: %+v", f)
		}
		if !strings.HasPrefix(f.Path, h.dir+"/") {
			t.Errorf("%s is outside the home", f.Path)
		}
		if f.Kind == "hook-program" {
			hook = f
		}
	}
	if kinds["hook-program"] != 1 || kinds["completion"] != 3 || kinds["man-page"] < 20 {
		t.Fatalf("files by kind: %v", kinds)
	}
	bin, _ := os.ReadFile(reeveBin)
	sum := sha256.Sum256(bin)
	copyData, err := os.ReadFile(hook.Path)
	if err != nil || hook.Detail != "sha256 "+hex.EncodeToString(sum[:]) || sha256.Sum256(copyData) != sum {
		t.Fatalf("hook program %+v: %v", hook, err)
	}

	r := h.must("install")
	if strings.Contains(r.stdout, "written") || strings.Count(r.stdout, "unchanged") != len(rep.Files) {
		t.Fatalf("second install changed files:\n%s", r.stdout)
	}

	// A damaged completion is rewritten, and only it.
	bash := filepath.Join(h.dir, "share/completions/reeve.bash")
	os.WriteFile(bash, []byte("broken"), 0o644)
	r = h.must("install")
	if strings.Count(r.stdout, "written") != 1 || !strings.Contains(r.stdout, "written   completion   "+bash) {
		t.Fatalf("repair:\n%s", r.stdout)
	}

	// bash completes `reeve serv` to service through the installed script.
	needFile(t, "/usr/share/bash-completion/bash_completion", "bash-completion")
	script := `source /usr/share/bash-completion/bash_completion; source "$1"; COMP_WORDS=(reeve serv); COMP_CWORD=1; COMP_LINE="reeve serv"; COMP_POINT=${#COMP_LINE}; __start_reeve; printf '%s\n' "${COMPREPLY[@]}"`
	cmd := exec.Command("bash", "-c", script, "bash", bash)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(reeveBin)+":"+os.Getenv("PATH"), "REEVE_HOME="+h.dir)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "service") || !strings.Contains(string(out), "server") {
		t.Fatalf("bash completion: %v\n%s", err, out)
	}
	for _, shell := range []string{"zsh", "fish"} {
		if p, err := exec.LookPath(shell); err == nil {
			name := map[string]string{"zsh": "_reeve", "fish": "reeve.fish"}[shell]
			if out, err := exec.Command(p, "-n", filepath.Join(h.dir, "share/completions", name)).CombinedOutput(); err != nil {
				t.Errorf("%s -n: %v\n%s", shell, err, out)
			}
		}
	}
	if p, err := exec.LookPath("man"); err == nil {
		cmd := exec.Command(p, "-P", "cat", "reeve-service-install")
		cmd.Env = append(os.Environ(), "MANPATH="+filepath.Join(h.dir, "share/man"))
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "reeve service install") {
			t.Errorf("man reeve-service-install: %v\n%s", err, out)
		}
	} else {
		page, _ := os.ReadFile(filepath.Join(h.dir, "share/man/man1/reeve-service-install.1"))
		if !strings.Contains(string(page), ".TH \"REEVE\"") {
			t.Errorf("man page:\n%s", page)
		}
	}
	// Hidden commands get no man page.
	if _, err := os.Stat(filepath.Join(h.dir, "share/man/man1/reeve-daemon-worker.1")); err == nil {
		t.Error("a hidden command has a man page")
	}
}
