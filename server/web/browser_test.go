package web_test

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/sdk/e2e"
	"reeve.dev/reeve/server/servertest"
)

// chromium returns the path of a Chromium from Debian's packages,
// installing it when it is missing and this process may (root, apt-get).
// Parallel test packages take a file lock so only one of them installs.
// Without it the test skips, unless REEVE_REQUIRE_AGENTS=1 makes that a
// failure.
func chromium(t *testing.T) string {
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
	if os.Geteuid() != 0 {
		return unavailable("not installed, and installing it needs root (apt-get install -y chromium)")
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return unavailable("not installed, and there is no apt-get")
	}
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "reeve-chromium-install.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return unavailable("lock: %v", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return unavailable("lock: %v", err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if p := find(); p != "" {
		return p // another package installed it while we waited
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	for _, args := range [][]string{{"update"}, {"install", "-y", "--no-install-recommends", "chromium"}} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return unavailable("apt-get %s: %v\n%s", strings.Join(args, " "), err, tail(out))
		}
	}
	if p := find(); p != "" {
		return p
	}
	return unavailable("apt-get installed chromium but it is not on PATH")
}

func tail(b []byte) string {
	s := string(b)
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return s
}

// browser starts a fresh headless Chromium with its own profile. The
// first run has no timeout (it would bound the browser's life); each step
// gets one.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := chromium(t)
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

const stepTimeout = 30 * time.Second

// steps runs browser steps, failing with the page's HTML.
func steps(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	if err := chromedp.Do(sctx, actions...); err != nil {
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		html, _ := chromedp.Run(hctx, chromedp.OuterHTML(chromedp.CSS("body")))
		t.Fatalf("%s: %v\npage: %s", what, err, html)
	}
}

// read runs one browser query.
func read[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(sctx, a)
	if err != nil {
		t.Fatalf("browser query: %v", err)
	}
	return v
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	return strings.TrimSpace(read(t, ctx, chromedp.Text(chromedp.CSS(sel))))
}

func attr(t *testing.T, ctx context.Context, sel, name string) string {
	t.Helper()
	return read(t, ctx, chromedp.AttributeValue(chromedp.CSS(sel), name)).Value
}

func location(t *testing.T, ctx context.Context) string {
	t.Helper()
	return read(t, ctx, chromedp.Location())
}

func css(sel string) chromedp.CSS { return chromedp.CSS(sel) }

func newAnchor(t *testing.T) (string, string) {
	t.Helper()
	k, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(k.PublicKey().Bytes()), e2e.Fingerprint(k.PublicKey().Bytes())
}

// A person signs in, opens the pair link a daemon printed, sees the
// machine's name and fingerprint, approves, and the daemon's poll then
// carries its credential. A second machine is denied.
func TestPairPagesInChromium(t *testing.T) {
	ctx := browser(t)
	s := servertest.Start(t, servertest.Options{})
	u := s.NewUser("owner@example.com")
	bg := context.Background()
	daemon := s.Client("")

	key, fp := newAnchor(t)
	minted, err := daemon.MintPairingCode(bg, sdk.PairingMachineRequest{Name: "ci-laptop", AnchorPublicKey: key})
	if err != nil {
		t.Fatal(err)
	}
	pairURL := minted.ApprovalURL
	if pairURL != s.URL+"/pair?code="+minted.Code {
		t.Fatalf("approval url %q", pairURL)
	}

	// The pair page needs a session: it sends the browser to sign in and
	// back.
	steps(t, ctx, "open the pair link signed out",
		chromedp.Navigate(pairURL),
		chromedp.WaitVisible(css("#use-link")),
	)
	if loc := location(t, ctx); !strings.Contains(loc, "/login?next=") || !strings.Contains(loc, minted.Code) {
		t.Fatalf("signed-out pair link went to %s", loc)
	}
	link, err := s.Host.IssueLoginLink(bg, u.Email)
	if err != nil {
		t.Fatal(err)
	}
	steps(t, ctx, "sign in with the pasted link",
		chromedp.SendKeys(css("#code"), link),
		chromedp.Click(css("#use-link")),
		chromedp.WaitVisible(css("#fingerprint")),
	)
	loc, name, shown, state := location(t, ctx), text(t, ctx, "#machine-name"), text(t, ctx, "#fingerprint"), text(t, ctx, "#state")
	if loc != pairURL || name != "ci-laptop" || shown != fp || state != "pending" {
		t.Fatalf("pair page at %s shows name %q fingerprint %q state %q; want ci-laptop %q pending", loc, name, shown, state, fp)
	}
	// The link was single-use.
	if _, err := s.Client("").Login(bg, link[strings.Index(link, "rvl_"):]); err == nil {
		t.Fatal("the login link worked twice")
	}

	steps(t, ctx, "approve",
		chromedp.Click(css("#approve")),
		chromedp.WaitVisible(css("#result")),
	)
	result, resultState, install := text(t, ctx, "#result"), attr(t, ctx, "#result", "data-state"), text(t, ctx, "#result-install")
	if resultState != "approved" || !strings.Contains(result, "ci-laptop") || !strings.Contains(result, "Default workspace") {
		t.Fatalf("approval result %q (%s)", result, resultState)
	}
	st, err := daemon.PairingStatus(bg, minted.Code, minted.StatusToken)
	if err != nil || st.RelayCredentials == nil || st.RelayCredentials.InstallID != install {
		t.Fatalf("daemon poll after the page approved: %+v %v", st, err)
	}
	// Reloading shows the decision, with no buttons left.
	steps(t, ctx, "reload the decided code",
		chromedp.Navigate(pairURL),
		chromedp.WaitVisible(css("#decided")),
	)
	if decided := text(t, ctx, "#decided"); !strings.Contains(decided, "already approved") {
		t.Fatalf("decided code shows %q", decided)
	}

	// Deny: mint a code on the page, let a machine claim it, refuse it.
	steps(t, ctx, "mint a code on the page",
		chromedp.Navigate(s.URL+"/pair"),
		chromedp.WaitVisible(css("#mint")),
		chromedp.Click(css("#mint")),
		chromedp.WaitVisible(css("#minted-code")),
	)
	code := strings.ReplaceAll(text(t, ctx, "#minted-code"), "-", "")
	key2, fp2 := newAnchor(t)
	claim, err := daemon.ClaimPairingCode(bg, code, sdk.PairingMachineRequest{Name: "unknown-box", AnchorPublicKey: key2})
	if err != nil {
		t.Fatalf("claim the page's code %q: %v", code, err)
	}
	steps(t, ctx, "open the claimed code",
		chromedp.Navigate(s.URL+"/pair?code="+code),
		chromedp.WaitVisible(css("#deny")),
	)
	shown = text(t, ctx, "#fingerprint")
	steps(t, ctx, "deny",
		chromedp.Click(css("#deny")),
		chromedp.WaitVisible(css("#result")),
	)
	result, resultState = text(t, ctx, "#result"), attr(t, ctx, "#result", "data-state")
	if shown != fp2 || resultState != "denied" || !strings.Contains(result, "unknown-box") || !strings.Contains(result, "not paired") {
		t.Fatalf("deny: fingerprint %q, result %q (%s)", shown, result, resultState)
	}
	if st, err := daemon.PairingStatus(bg, code, claim.StatusToken); err != nil || st.State != sdk.PairingDenied || st.RelayCredentials != nil {
		t.Fatalf("daemon poll after deny: %+v %v", st, err)
	}

	// An unknown code is reported, not a blank page.
	steps(t, ctx, "unknown code",
		chromedp.Navigate(s.URL+"/pair?code=ZZZZZZZZ"),
		chromedp.WaitVisible(css("#error")),
	)
	if e := text(t, ctx, "#error"); !strings.Contains(e, "no such pairing code") {
		t.Fatalf("unknown code shows %q", e)
	}

	// Sign out, then sign in through an opened login link's button.
	steps(t, ctx, "sign out",
		chromedp.Click(css("#logout")),
		chromedp.WaitVisible(css("#notice")),
	)
	if loc := location(t, ctx); !strings.Contains(loc, "/login") {
		t.Fatalf("after sign-out at %s", loc)
	}
	link2, err := s.Host.IssueLoginLink(bg, u.Email)
	if err != nil {
		t.Fatal(err)
	}
	steps(t, ctx, "open a login link",
		chromedp.Navigate(link2+"&next=%2Fpair"),
		chromedp.WaitVisible(css("#signin")),
		chromedp.Click(css("#signin")),
		chromedp.WaitVisible(css("#lookup")),
	)
	if loc := location(t, ctx); loc != s.URL+"/pair" {
		t.Fatalf("after sign-in at %s", loc)
	}
}
