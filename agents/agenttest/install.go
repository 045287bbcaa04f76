// Package agenttest lets tests drive the real coding-agent programs offline:
// it installs pinned versions of Claude Code and Codex from the npm registry
// into an ignored cache folder, and serves scripted Anthropic Messages and
// OpenAI Responses APIs on 127.0.0.1 for them to talk to.
package agenttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// Pinned agent versions. Bumping one re-installs it into a fresh cache
// folder; re-record the golden fixtures under testdata/ in the same change
// (see docs/agents-testing.md).
const (
	ClaudeVersion = "2.1.329"
	CodexVersion  = "0.169.0"
	GeminiVersion = "0.61.0"
)

// RequireEnv turns "agent program unavailable" from a skip into a failure.
// CI sets it so a broken install can never pass silently.
const RequireEnv = "REEVE_REQUIRE_AGENTS"

// Agent describes one installable agent program.
type Agent struct {
	// Name is the short name used for the cache folder, e.g. "claude".
	Name string
	// Package is the npm package, e.g. "@anthropic-ai/claude-code".
	Package string
	// Version is the exact npm version to install.
	Version string
	// Executable returns candidate executable paths relative to the npm
	// prefix, best first. The first one that exists wins.
	Executable func(goos, goarch string) []string
}

// ClaudeAgent is the pinned Claude Code package. The npm package is a thin
// wrapper whose postinstall copies a native binary out of a per-platform
// optional dependency; we run that native binary directly so installs can
// use --ignore-scripts and no Node.js process sits between us and the agent.
var ClaudeAgent = Agent{
	Name:    "claude",
	Package: "@anthropic-ai/claude-code",
	Version: ClaudeVersion,
	Executable: func(goos, goarch string) []string {
		arch := map[string]string{"amd64": "x64", "arm64": "arm64"}[goarch]
		var c []string
		if arch != "" {
			c = append(c, filepath.Join("node_modules", "@anthropic-ai", "claude-code-"+goos+"-"+arch, "claude"))
			if goos == "linux" {
				c = append(c, filepath.Join("node_modules", "@anthropic-ai", "claude-code-linux-"+arch+"-musl", "claude"))
			}
		}
		// With install scripts enabled the wrapper's bin is the native binary too.
		return append(c, filepath.Join("node_modules", "@anthropic-ai", "claude-code", "bin", "claude.exe"))
	},
}

// CodexAgent is the pinned Codex package. Its bin is a Node.js launcher that
// execs a Rust binary shipped in a per-platform optional dependency (an npm
// alias such as @openai/codex-linux-x64 -> @openai/codex@<v>-linux-x64); we
// return that native binary.
var CodexAgent = Agent{
	Name:    "codex",
	Package: "@openai/codex",
	Version: CodexVersion,
	Executable: func(goos, goarch string) []string {
		triple := map[string]string{
			"linux/amd64":  "x86_64-unknown-linux-musl",
			"linux/arm64":  "aarch64-unknown-linux-musl",
			"darwin/amd64": "x86_64-apple-darwin",
			"darwin/arm64": "aarch64-apple-darwin",
		}[goos+"/"+goarch]
		arch := map[string]string{"amd64": "x64", "arm64": "arm64"}[goarch]
		if triple == "" {
			return nil
		}
		return []string{
			filepath.Join("node_modules", "@openai", "codex-"+goos+"-"+arch, "vendor", triple, "bin", "codex"),
			filepath.Join("node_modules", "@openai", "codex", "vendor", triple, "bin", "codex"),
		}
	},
}

// GeminiAgent is the pinned Gemini CLI package: a bundled Node.js program
// (Node.js 20 or later on PATH), run through its bin script. Its optional
// native dependencies (node-pty, keytar) are installed but not needed
// headless.
var GeminiAgent = Agent{
	Name:    "gemini",
	Package: "@google/gemini-cli",
	Version: GeminiVersion,
	Executable: func(goos, goarch string) []string {
		return []string{filepath.Join("node_modules", "@google", "gemini-cli", "bundle", "gemini.js")}
	},
}

// Claude returns the path of the pinned Claude Code executable, installing
// it on first use. It skips the test when the program cannot be installed,
// or fails it when REEVE_REQUIRE_AGENTS=1.
func Claude(t testing.TB) string {
	t.Helper()
	return mustInstall(t, ClaudeAgent)
}

// Codex returns the path of the pinned Codex executable; see Claude.
func Codex(t testing.TB) string {
	t.Helper()
	return mustInstall(t, CodexAgent)
}

// Gemini returns the path of the pinned Gemini CLI executable; see Claude.
func Gemini(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		Unavailable(t, "Gemini CLI needs Node.js: %v", err)
	}
	return mustInstall(t, GeminiAgent)
}

// Unavailable skips the test with the message, or fails it when
// REEVE_REQUIRE_AGENTS=1. Tests that find an agent unusable for reasons of
// their own (not just a failed install) should report it the same way.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%s (%s=1, so this is a failure)", msg, RequireEnv)
		return
	}
	t.Skipf("%s (set %s=1 to make this a failure)", msg, RequireEnv)
}

// installs memoises results within one test binary so parallel tests do not
// queue on the file lock just to find the same answer.
var installs sync.Map // agent name@version -> *installResult

type installResult struct {
	once sync.Once
	path string
	err  error
}

func mustInstall(t testing.TB, a Agent) string {
	t.Helper()
	r, _ := installs.LoadOrStore(a.Name+"@"+a.Version, &installResult{})
	res := r.(*installResult)
	res.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		res.path, res.err = Install(ctx, InstallOptions{Agent: a})
	})
	if res.err != nil {
		Unavailable(t, "agent %s@%s unavailable: %v", a.Package, a.Version, res.err)
	}
	return res.path
}

// InstallOptions configures Install.
type InstallOptions struct {
	// Agent to install.
	Agent Agent
	// CacheDir holds one folder per name@version. Default:
	// <repo>/.cache/agents, the repo root being the nearest folder with a
	// go.mod above the working directory.
	CacheDir string
	// NPM is the npm executable. Default: "npm" from PATH.
	NPM string
}

// installedMarker is written last inside the temp folder, so a cache folder
// without it is a leftover of an interrupted install, never a usable one.
const installedMarker = ".agenttest-installed"

// Install makes sure the agent is in the cache and returns its executable.
// Several processes may call it at once: a file lock serialises installers,
// and each install happens in a temp folder renamed into place when done.
func Install(ctx context.Context, o InstallOptions) (string, error) {
	a := o.Agent
	if a.Name == "" || a.Package == "" || a.Version == "" || a.Executable == nil {
		return "", errors.New("install agent: incomplete Agent")
	}
	cache := o.CacheDir
	if cache == "" {
		root, err := RepoRoot()
		if err != nil {
			return "", fmt.Errorf("install %s: %w", a.Name, err)
		}
		cache = filepath.Join(root, ".cache", "agents")
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", fmt.Errorf("install %s: %w", a.Name, err)
	}
	final := filepath.Join(cache, a.Name+"@"+a.Version)

	// Fast path without the lock: a folder with the marker is complete,
	// because it only ever appears through an atomic rename.
	if p, err := findExecutable(a, final); err == nil {
		return p, nil
	}

	unlock, err := lockFile(ctx, final+".lock")
	if err != nil {
		return "", fmt.Errorf("install %s: %w", a.Name, err)
	}
	defer unlock()

	// Another process may have finished while we waited for the lock.
	if p, err := findExecutable(a, final); err == nil {
		return p, nil
	}
	if err := os.RemoveAll(final); err != nil {
		return "", fmt.Errorf("install %s: remove incomplete install: %w", a.Name, err)
	}

	npm := o.NPM
	if npm == "" {
		npm = "npm"
	}
	npmPath, err := exec.LookPath(npm)
	if err != nil {
		return "", fmt.Errorf("install %s: npm not found: %w", a.Name, err)
	}

	tmp, err := os.MkdirTemp(cache, "."+a.Name+"@"+a.Version+"-tmp-")
	if err != nil {
		return "", fmt.Errorf("install %s: %w", a.Name, err)
	}
	defer os.RemoveAll(tmp) // no-op after a successful rename

	// --ignore-scripts: we never need the packages' postinstall (see
	// ClaudeAgent), and not running third-party scripts keeps the install
	// reproducible. --include=optional: the native binaries live in
	// optional dependencies, which a user npmrc might otherwise omit.
	cmd := exec.CommandContext(ctx, npmPath, "install",
		"--prefix", tmp,
		"--no-audit", "--no-fund", "--no-save", "--no-package-lock",
		"--ignore-scripts", "--include=optional", "--loglevel=error",
		a.Package+"@"+a.Version)
	cmd.Dir = tmp
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("install %s: npm install %s@%s: %w: %s",
			a.Name, a.Package, a.Version, err, tail(out.String(), 2000))
	}
	if _, err := findExecutableIn(a, tmp); err != nil {
		return "", fmt.Errorf("install %s: %w (npm output: %s)", a.Name, err, tail(out.String(), 2000))
	}
	if err := os.WriteFile(filepath.Join(tmp, installedMarker), []byte(a.Package+"@"+a.Version+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("install %s: %w", a.Name, err)
	}
	// MkdirTemp made it 0700; the cache is shared with whoever runs tests.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("install %s: %w", a.Name, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", fmt.Errorf("install %s: %w", a.Name, err)
	}
	return findExecutable(a, final)
}

func findExecutable(a Agent, dir string) (string, error) {
	if _, err := os.Stat(filepath.Join(dir, installedMarker)); err != nil {
		return "", fmt.Errorf("not installed in %s", dir)
	}
	return findExecutableIn(a, dir)
}

func findExecutableIn(a Agent, dir string) (string, error) {
	cands := a.Executable(runtime.GOOS, runtime.GOARCH)
	for _, rel := range cands {
		p := filepath.Join(dir, rel)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("no %s executable for %s/%s in %s (looked for %s)",
		a.Name, runtime.GOOS, runtime.GOARCH, dir, strings.Join(cands, ", "))
}

// RepoRoot walks up from the working directory to the folder holding go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repo root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find repo root: no go.mod above the working directory")
		}
		dir = parent
	}
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
