package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/internal/syncbuf"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store/storetest"
)

func testEnv() (*Env, *bytes.Buffer, *bytes.Buffer) {
	var out, errb bytes.Buffer
	return &Env{In: strings.NewReader(""), Out: &out, Err: &errb, Getenv: func(string) string { return "" }, Programs: testPrograms()}, &out, &errb
}

func TestServerTokenCreatePrintsAUsableToken(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "data")
		testServerTokenCreate(t, []string{"--data-dir", dir}, serverOptions{dataDir: dir})
	})
	t.Run("postgres", func(t *testing.T) {
		u := storetest.PostgresURL(t)
		testServerTokenCreate(t, []string{"--database-url", u}, serverOptions{databaseURL: u})
	})
}

func testServerTokenCreate(t *testing.T, db []string, so serverOptions) {
	env, out, _ := testEnv()
	if code := Execute(context.Background(), env, append([]string{"server", "token", "create", "--user", "ops@example.com", "--json"}, db...)); code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	var info serverTokenInfo
	if err := json.Unmarshal(out.Bytes(), &info); err != nil {
		t.Fatalf("decode %q: %v", out.String(), err)
	}
	if !strings.HasPrefix(info.Token, "rvp_") || !info.CreatedWorkspace {
		t.Fatalf("unexpected %+v", info)
	}
	// A second token for the same user makes no new workspace.
	env2, out2, _ := testEnv()
	if code := Execute(context.Background(), env2, append([]string{"server", "token", "create", "--user", "ops@example.com"}, db...)); code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	second := strings.TrimSpace(out2.String())
	if !strings.HasPrefix(second, "rvp_") || second == info.Token {
		t.Fatalf("second token %q", second)
	}

	// Both work against a server on the same data directory; the first
	// start also prints a one-time login link for the first owner only when
	// the store is empty (it is not, so none is printed).
	senv, sout, _ := testEnv()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		so.env, so.listen, so.ready = senv, "127.0.0.1:0", func(u string) { ready <- u }
		done <- runServer(ctx, &so)
	}()
	url := <-ready
	for _, tok := range []string{info.Token, second} {
		c := &sdk.Client{BaseURL: url, Token: tok}
		ws, err := c.ListWorkspaces(context.Background())
		if err != nil || len(ws) != 1 {
			t.Fatalf("list workspaces with operator token: %v %v", ws, err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("server: %v", err)
	}
	if strings.Contains(sout.String(), "login link") {
		t.Fatalf("login link printed for a non-empty store: %q", sout.String())
	}
}

func TestServerFirstStartPrintsALoginLinkThatSignsIn(t *testing.T) {
	env, _, _ := testEnv()
	out := &syncbuf.Buffer{}
	env.Out = out
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- runServer(ctx, &serverOptions{env: env, listen: "127.0.0.1:0", dataDir: filepath.Join(t.TempDir(), "d"), ownerEmail: "boss@example.com", ready: func(u string) { ready <- u }})
	}()
	url := <-ready
	var link, printed string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := regexp.MustCompile(`(\S+)code=(rvl_[a-z0-9]+)`).FindStringSubmatch(out.String()); m != nil {
			printed, link = m[0], m[2]
			break
		}
	}
	if link == "" {
		t.Fatalf("no login link in %q", out.String())
	}
	// One link, and it is the sign-in page, not the API callback.
	if printed != url+"/login?code="+link || strings.Count(out.String(), "rvl_") != 1 || !strings.Contains(out.String(), "reeve server login-link --email boss@example.com") {
		t.Fatalf("first start printed %q", out.String())
	}
	// Opening it, and opening the API callback with the same code (a
	// link scanner, a second click), spends nothing: the callback sends
	// the browser to the sign-in page.
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, u := range []string{printed, printed, url + "/api/auth/callback?code=" + link} {
		resp, err := noFollow.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), "rvs_") {
			t.Fatalf("GET %s showed a session token", u)
		}
		if strings.Contains(u, "/api/auth/callback") && (resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != printed) {
			t.Fatalf("GET callback: %d to %q, want 303 to %q", resp.StatusCode, resp.Header.Get("Location"), printed)
		}
	}
	res, err := (&sdk.Client{BaseURL: url}).Login(context.Background(), link)
	if err != nil || res.User.Email != "boss@example.com" {
		t.Fatalf("login: %+v %v", res, err)
	}
	if _, err := (&sdk.Client{BaseURL: url}).Login(context.Background(), link); !sdk.IsCode(err, sdk.CodeUnauthenticated) {
		t.Fatalf("second use of the link: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("server: %v", err)
	}
}

func TestServerBadFlagsAreUsageErrors(t *testing.T) {
	env, _, _ := testEnv()
	if code := Execute(context.Background(), env, []string{"server", "token", "create", "--data-dir", t.TempDir()}); code != ExitUsage {
		t.Fatalf("missing --user: exit %d", code)
	}
	if code := Execute(context.Background(), env, []string{"server", "--listen", "nonsense"}); code != ExitUsage {
		t.Fatalf("bad --listen: exit %d", code)
	}
	if code := Execute(context.Background(), env, []string{"server", "--database-url", "mysql://x/y", "--listen", "127.0.0.1:0"}); code != ExitUsage {
		t.Fatalf("mysql url: exit %d", code)
	}
}

// An unreachable database at start is a clear error and an exit, not a
// hang or a crash loop.
func TestServerUnreachableDatabaseExits(t *testing.T) {
	env, _, errb := testEnv()
	start := time.Now()
	code := Execute(context.Background(), env, []string{"server", "--database-url", "postgres://reeve@127.0.0.1:1/reeve?connect_timeout=5", "--listen", "127.0.0.1:0"})
	if code != ExitFailure || !strings.Contains(errb.String(), "cannot reach the database at 127.0.0.1:1/reeve") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	if time.Since(start) > 60*time.Second {
		t.Fatalf("took %v to give up", time.Since(start))
	}
}

func TestServerInvitePrintsALinkThatMakesAMember(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	run := func(args ...string) (int, string, string) {
		env, out, errb := testEnv()
		code := Execute(context.Background(), env, args)
		return code, out.String(), errb.String()
	}
	code, out, _ := run("server", "token", "create", "--data-dir", dir, "--user", "ops@example.com")
	if code != ExitOK {
		t.Fatalf("token: exit %d", code)
	}
	ops := strings.TrimSpace(out)
	code, out, _ = run("server", "token", "create", "--data-dir", dir, "--user", "joiner@example.com")
	if code != ExitOK {
		t.Fatalf("token: exit %d", code)
	}
	joiner := strings.TrimSpace(out)

	senv, _, _ := testEnv()
	console := &syncbuf.Buffer{}
	senv.Out = console
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- runServer(ctx, &serverOptions{env: senv, listen: "127.0.0.1:0", dataDir: dir, ready: func(u string) { ready <- u }})
	}()
	url := <-ready
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	}()
	opsClient := &sdk.Client{BaseURL: url, Token: ops}
	ws, err := opsClient.ListWorkspaces(context.Background())
	if err != nil || len(ws) != 1 {
		t.Fatalf("workspaces %v %v", ws, err)
	}

	for _, bad := range []struct {
		args []string
		code int
	}{
		{[]string{"--email", "joiner@example.com"}, ExitUsage},
		{[]string{"--workspace", ws[0].ID}, ExitUsage},
		{[]string{"--workspace", ws[0].ID, "--email", "joiner@example.com", "--role", "root"}, ExitUsage},
		{[]string{"--workspace", ws[0].ID, "--email", "nope"}, ExitUsage},
		{[]string{"--workspace", ws[0].ID, "--email", "joiner@example.com", "--expires", "1000h"}, ExitUsage},
		{[]string{"--workspace", "01ARZ3NDEKTSV4RRFFQ69G5FAV", "--email", "joiner@example.com"}, ExitNotFound},
	} {
		if code, _, _ := run(append([]string{"server", "invite", "--data-dir", dir}, bad.args...)...); code != bad.code {
			t.Errorf("%v: exit %d, want %d", bad.args, code, bad.code)
		}
	}
	code, out, _ = run("server", "invite", "--data-dir", dir, "--workspace", ws[0].ID, "--email", "joiner@example.com", "--role", "admin", "--app-url", url, "--json")
	if code != ExitOK {
		t.Fatalf("invite: exit %d", code)
	}
	var info serverInviteInfo
	if err := json.Unmarshal([]byte(out), &info); err != nil || !strings.HasPrefix(info.AcceptURL, url+"/invite?token=") {
		t.Fatalf("invite output %q: %v", out, err)
	}
	acc, err := (&sdk.Client{BaseURL: url, Token: joiner}).AcceptInvitation(context.Background(), info.Token)
	if err != nil || acc.WorkspaceID != ws[0].ID || acc.Role != "admin" {
		t.Fatalf("accept: %+v %v", acc, err)
	}
	members, err := opsClient.ListMembers(context.Background(), ws[0].ID)
	if err != nil || len(members) != 2 {
		t.Fatalf("members %v %v", members, err)
	}
	// An invitation made through the API is printed on the console.
	rest, err := opsClient.CreateInvitation(context.Background(), ws[0].ID, sdk.InvitationCreateRequest{Email: "third@example.com", Role: "member"})
	if err != nil {
		t.Fatal(err)
	}
	if c := console.String(); !strings.Contains(c, "invitation for third@example.com") || !strings.Contains(c, rest.AcceptURL) {
		t.Fatalf("console %q lacks the link %s", c, rest.AcceptURL)
	}
}

// An operator can always let a person back in: login-link prints a fresh
// link for an existing user, whether or not the server runs, and the link
// signs in once.
func TestServerLoginLinkLetsAUserBackIn(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	run := func(args ...string) (int, string, string) {
		env, out, errb := testEnv()
		code := Execute(context.Background(), env, args)
		return code, out.String(), errb.String()
	}
	if code, _, _ := run("server", "token", "create", "--data-dir", dir, "--user", "ann@example.com"); code != ExitOK {
		t.Fatalf("token: exit %d", code)
	}
	code, out, errs := run("server", "login-link", "--data-dir", dir, "--email", "ann@example.com", "--app-url", "https://cp.example.com")
	link := strings.TrimSpace(out)
	if code != ExitOK || !strings.HasPrefix(link, "https://cp.example.com/login?code=rvl_") || !strings.Contains(errs, "ann@example.com") {
		t.Fatalf("login-link: exit %d, out %q, err %q", code, out, errs)
	}
	code, out, _ = run("server", "login-link", "--data-dir", dir, "--email", "ann@example.com", "--json")
	var info struct {
		Email     string    `json:"email"`
		URL       string    `json:"url"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil || code != ExitOK {
		t.Fatalf("--json: exit %d %q %v", code, out, err)
	}
	if info.Email != "ann@example.com" || !strings.HasPrefix(info.URL, "http://127.0.0.1:8080/login?code=rvl_") || time.Until(info.ExpiresAt) < 23*time.Hour {
		t.Fatalf("--json: %+v", info)
	}

	for _, bad := range []struct {
		args []string
		want int
	}{
		{[]string{"--email", "nobody@example.com"}, ExitNotFound},
		{[]string{}, ExitUsage},
		{[]string{"--email", "not-an-email"}, ExitUsage},
		{[]string{"--email", "ann@example.com", "--expires", "400h"}, ExitUsage},
		{[]string{"--email", "ann@example.com", "--app-url", "cp.example.com"}, ExitUsage},
	} {
		if code, out, errs := run(append([]string{"server", "login-link", "--data-dir", dir}, bad.args...)...); code != bad.want || out != "" || errs == "" {
			t.Fatalf("%v: exit %d (want %d), out %q, err %q", bad.args, code, bad.want, out, errs)
		}
	}

	// Both links sign in once against a server on that directory.
	senv, _, _ := testEnv()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- runServer(ctx, &serverOptions{env: senv, listen: "127.0.0.1:0", dataDir: dir, ready: func(u string) { ready <- u }})
	}()
	url := <-ready
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	}()
	c := &sdk.Client{BaseURL: url}
	for _, l := range []string{link, info.URL} {
		code := l[strings.Index(l, "rvl_"):]
		res, err := c.Login(context.Background(), code)
		if err != nil || res.User.Email != "ann@example.com" {
			t.Fatalf("login with %s: %+v %v", l, res, err)
		}
		if _, err := c.Login(context.Background(), code); !sdk.IsCode(err, sdk.CodeUnauthenticated) {
			t.Fatalf("second use: %v", err)
		}
	}
}
