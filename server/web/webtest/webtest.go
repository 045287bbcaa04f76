// Package webtest runs the web app's tests in a real headless Chromium:
// Debian's chromium, installed by the test when it is missing and the
// test runs as root (never by hand), driven with chromedp. Screenshots go
// under a gitignored directory for people to look at.
package webtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"reeve.dev/reeve/internal/aptget"
)

// Chromium returns the path of a Chromium from Debian's packages,
// installing it when it is missing and this process may (root, apt-get).
// Parallel test packages install one at a time (internal/aptget).
// Without it the test skips, unless REEVE_REQUIRE_AGENTS=1 makes that a
// failure.
func Chromium(t testing.TB) string {
	t.Helper()
	find := func() string {
		for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
			if p, err := exec.LookPath(name); err == nil {
				return p
			}
		}
		return ""
	}
	if p := find(); p != "" {
		return p
	}
	unavailable := func(format string, args ...any) string {
		t.Helper()
		if os.Getenv("REEVE_REQUIRE_AGENTS") == "1" {
			t.Fatalf("chromium is required (REEVE_REQUIRE_AGENTS=1) but unavailable: "+format, args...)
		}
		t.Skipf("skipping the browser test: chromium is unavailable: "+format, args...)
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if err := aptget.Install(ctx, func() bool { return find() != "" }, "chromium"); err != nil {
		return unavailable("%v", err)
	}
	return find()
}

// Browser starts a fresh headless Chromium with its own profile. The
// first run has no timeout (it would bound the browser's life); each step
// gets one.
func Browser(t testing.TB) context.Context {
	t.Helper()
	path := Chromium(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
	}
	// The profile is not t.TempDir(): Chromium's helper processes (the
	// zygote, the crash handler) outlive the browser for a moment and keep
	// writing it, so the testing package's removal failed now and then.
	// Chromium runs in its own process group, which the cleanup kills
	// whole before removing the profile, retrying while files still move.
	profile, err := os.MkdirTemp("", "reeve-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	pgid := 0
	opts = append(opts, chromedp.UserDataDir(profile), chromedp.ModifyCmdFunc(func(cmd *exec.Cmd) {
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.Setpgid = true
	}))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(func() {
		if b := chromedp.FromContext(ctx).Browser; b != nil && b.Process() != nil {
			pgid = b.Process().Pid
		}
		cancelCtx()
		cancelAlloc()
		if pgid > 0 {
			syscall.Kill(-pgid, syscall.SIGKILL)
		}
		var err error
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if err = os.RemoveAll(profile); err == nil {
				return
			}
		}
		t.Errorf("remove the browser profile: %v", err)
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium %s: %v", path, err)
	}
	return ctx
}

// StepTimeout bounds each browser step.
const StepTimeout = 30 * time.Second

// Steps runs browser steps, failing with the page's HTML.
func Steps(t testing.TB, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, StepTimeout)
	defer cancel()
	for _, a := range actions {
		err := chromedp.Do(sctx, a)
		// A page script (the notification feed in the header, for one)
		// changed the document between the action's query and its use of
		// the node, so the action did nothing: run it again.
		for attempt := 0; attempt < 3 && nodeVanished(err); attempt++ {
			err = chromedp.Do(sctx, a)
		}
		if err != nil {
			hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			html, _ := chromedp.Run(hctx, chromedp.OuterHTML(chromedp.CSS("body")))
			t.Fatalf("%s: %v\npage: %s", what, err, html)
		}
	}
}

// nodeVanished reports Chromium's answers for a node id that no longer
// names a node in the document.
func nodeVanished(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "No node with given id found") || strings.Contains(msg, "Could not find node with given id")
}

// Read runs one browser query.
func Read[T any](t testing.TB, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	for attempt := 0; ; attempt++ {
		sctx, cancel := context.WithTimeout(ctx, StepTimeout)
		v, err := chromedp.Run(sctx, a)
		cancel()
		if err == nil {
			return v
		}
		// The page's script replaced the node between the query and the
		// read: query again.
		if attempt < 3 && nodeVanished(err) {
			continue
		}
		t.Fatalf("browser query: %v", err)
	}
}

// Text is the text of the first match of sel.
func Text(t testing.TB, ctx context.Context, sel string) string {
	t.Helper()
	return strings.TrimSpace(Read(t, ctx, chromedp.Text(chromedp.CSS(sel))))
}

// Attr is an attribute of the first match of sel.
func Attr(t testing.TB, ctx context.Context, sel, name string) string {
	t.Helper()
	return Read(t, ctx, chromedp.AttributeValue(chromedp.CSS(sel), name)).Value
}

// Location is the page's URL.
func Location(t testing.TB, ctx context.Context) string {
	t.Helper()
	return Read(t, ctx, chromedp.Location())
}

// CSS selects by CSS selector.
func CSS(sel string) chromedp.CSS { return chromedp.CSS(sel) }

// ArtifactDir is where screenshots go: $REEVE_ARTIFACTS, else .artifacts
// at the module root (gitignored).
func ArtifactDir(t testing.TB) string {
	if d := os.Getenv("REEVE_ARTIFACTS"); d != "" {
		return d
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, ".artifacts")
		}
		if filepath.Dir(d) == d {
			return filepath.Join(dir, ".artifacts")
		}
	}
}

// Screenshot saves the whole current page, laid out at width CSS pixels,
// as screenshots/<name>-<width>.png under ArtifactDir, and returns the
// path. The viewport is left at that width.
func Screenshot(t testing.TB, ctx context.Context, name string, width int64) string {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, StepTimeout)
	defer cancel()
	if err := chromedp.Do(sctx, chromedp.EmulateViewport(width, 900), chromedp.Sleep(300*time.Millisecond)); err != nil {
		t.Fatalf("set the viewport to %d: %v", width, err)
	}
	png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	dir := filepath.Join(ArtifactDir(t), "screenshots")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name+"-"+strconv.FormatInt(width, 10)+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
