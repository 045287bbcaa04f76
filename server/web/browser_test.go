package web_test

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/sdk/e2e"
	"reeve.dev/reeve/server/servertest"
	"reeve.dev/reeve/server/web/webtest"
)

// Short names for the shared browser helpers.
var (
	browser  = webtest.Browser
	steps    = webtest.Steps
	text     = webtest.Text
	attr     = webtest.Attr
	location = webtest.Location
	css      = webtest.CSS
)

func read[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	return webtest.Read(t, ctx, a)
}

// signInAs signs the browser out, opens a login link issued for another
// person and signs in with it, then opens page and waits for ready: how
// the page tests look at a page through a second person's eyes.
func signInAs(t *testing.T, ctx context.Context, link, page, ready string) {
	t.Helper()
	steps(t, ctx, "sign in with another person's link and open "+page,
		chromedp.EmulateViewport(1280, 900),
		chromedp.Click(css("#logout")),
		chromedp.WaitVisible(css("#notice")),
		chromedp.Navigate(link),
		chromedp.Click(css("#signin")),
		chromedp.WaitVisible(css(".workspace")),
		chromedp.Navigate(page),
		chromedp.WaitVisible(css(ready)),
	)
}

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
	// The decision answered with a redirect to the code's own page.
	if loc := location(t, ctx); loc != pairURL {
		t.Fatalf("after approving the browser is at %s", loc)
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
	// Minting answered with a redirect to /pair: reloading mints nothing
	// and shows the code no more.
	if loc := location(t, ctx); loc != s.URL+"/pair" {
		t.Fatalf("after minting the browser is at %s", loc)
	}
	steps(t, ctx, "reload after minting",
		chromedp.Reload(),
		chromedp.WaitVisible(css("#mint")),
	)
	if n := read(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll("#minted-code").length`)); n != 0 {
		t.Fatal("the reloaded pair page minted or showed a code again")
	}
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
