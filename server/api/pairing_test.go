package api_test

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"reeve.dev/reeve/server/api"
	"reeve.dev/reeve/server/auth"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/sdk/e2e"
	"reeve.dev/reeve/server/secrets"
	"reeve.dev/reeve/server/servertest"
	"reeve.dev/reeve/server/store"
)

// anchor is a fresh daemon trust anchor: the public key as sent, and its
// fingerprint as the page shows it.
func anchor(t *testing.T) (string, string) {
	t.Helper()
	k, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub := k.PublicKey().Bytes()
	return base64.StdEncoding.EncodeToString(pub), e2e.Fingerprint(pub)
}

func TestBrowserMintedPairing(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	u := s.NewUser("pair@example.com")
	ctx := context.Background()
	key, fp := anchor(t)

	code := expect(t, do(t, s, "POST", "/api/workspaces/"+u.Workspace+"/pairing-codes", u.Token, `{}`), 201, "browser mints")
	c := dataOf(code)["code"].(string)
	if len(c) != api.CodeLength || dataOf(code)["state"] != "pending" || dataOf(code)["approval_url"] != s.URL+"/pair?code="+c {
		t.Fatalf("minted: %s", code.Body)
	}
	expect(t, do(t, s, "POST", "/api/pairing-codes/"+c+"/approve", u.Token, `{}`), 409, "approve before any machine claimed")
	expect(t, do(t, s, "POST", "/api/pairing-codes/"+c+"/claim", "", `{"name":"laptop"}`), 422, "claim without an anchor")
	expect(t, do(t, s, "POST", "/api/pairing-codes/"+c+"/claim", "", `{"name":"laptop","anchor_public_key":"c2hvcnQ="}`), 422, "claim with a short anchor")
	// People type codes in lower case and with a dash: same code.
	lower := strings.ToLower(c[:4] + "-" + c[4:])
	claim := expect(t, do(t, s, "POST", "/api/pairing-codes/"+lower+"/claim", "", `{"name":"laptop","anchor_public_key":"`+key+`"}`), 200, "daemon claims")
	st := dataOf(claim)["status_token"].(string)
	if !strings.HasPrefix(st, "rvt_") || claim.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("claim: %s", claim.Body)
	}
	expect(t, do(t, s, "POST", "/api/pairing-codes/"+c+"/claim", "", `{"anchor_public_key":"`+key+`"}`), 409, "claim twice (single use)")
	expect(t, do(t, s, "GET", "/api/pairing-codes/"+c+"/status", "", nil), 401, "status without token")
	expect(t, do(t, s, "GET", "/api/pairing-codes/"+c+"/status", "rvt_wrong", nil), 401, "status with a wrong token")
	pend := expect(t, do(t, s, "GET", "/api/pairing-codes/"+c+"/status", st, nil), 200, "status claimed")
	if dataOf(pend)["approved"] != false || dataOf(pend)["state"] != "claimed" || dataOf(pend)["relay_credentials"] != nil {
		t.Fatalf("claimed: %s", pend.Body)
	}

	// What the approval page reads: name and fingerprint.
	other := s.NewUser("stranger@example.com")
	member := s.AddMember(u.Workspace, "member@example.com", sdk.RoleMember)
	expect(t, do(t, s, "GET", "/api/pairing-codes/"+c, "", nil), 401, "show without login")
	expect(t, do(t, s, "GET", "/api/pairing-codes/"+c, other.Token, nil), 403, "show to a stranger")
	shown, err := u.Client.GetPairingCode(ctx, c)
	if err != nil || shown.Machine == nil || shown.Machine.Name != "laptop" || shown.Machine.AnchorFingerprint != fp || shown.StatusToken != "" {
		t.Fatalf("show: %+v %v", shown, err)
	}

	expect(t, do(t, s, "POST", "/api/pairing-codes/"+c+"/approve", other.Token, `{}`), 403, "stranger approves")
	expect(t, do(t, s, "POST", "/api/pairing-codes/"+c+"/approve", member.Token, `{}`), 403, "plain member approves")
	expect(t, do(t, s, "POST", "/api/pairing-codes/"+c+"/approve", u.Token, `{"workspace":"`+other.Workspace+`"}`), 409, "approve into another workspace")
	appr := expect(t, do(t, s, "POST", "/api/pairing-codes/"+c+"/approve", u.Token, `{}`), 200, "approve")
	// The approver never sees the credential: the daemon gets the only copy.
	if dataOf(appr)["relay_credentials"] != nil || dataOf(appr)["state"] != "approved" || strings.Contains(string(appr.Body), "rvi_") {
		t.Fatalf("approve answer: %s", appr.Body)
	}
	expect(t, do(t, s, "POST", "/api/pairing-codes/"+c+"/approve", u.Token, `{}`), 409, "approve twice")
	expect(t, do(t, s, "POST", "/api/pairing-codes/"+c+"/deny", u.Token, `{}`), 409, "deny after approval")

	// Two racing polls: exactly one receives the credential.
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		creds []*sdk.RelayCredentials
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := s.Client("").PairingStatus(ctx, c, st)
			if err != nil {
				t.Errorf("poll: %v", err)
				return
			}
			if !got.Approved {
				t.Errorf("poll after approval: %+v", got)
			}
			mu.Lock()
			defer mu.Unlock()
			if got.RelayCredentials != nil {
				creds = append(creds, got.RelayCredentials)
			}
		}()
	}
	wg.Wait()
	if len(creds) != 1 {
		t.Fatalf("%d polls received the credential, want exactly 1", len(creds))
	}
	cred := creds[0]
	if !strings.HasPrefix(cred.IssueToken, auth.PrefixInstall) || cred.WorkspaceID != u.Workspace || cred.RelayURL != s.URL || cred.ServerURL != s.URL {
		t.Fatalf("credentials: %+v", cred)
	}
	if again, err := s.Client("").PairingStatus(ctx, c, st); err != nil || again.RelayCredentials != nil || !again.Approved {
		t.Fatalf("credential delivered twice: %+v %v", again, err)
	}

	// The install carries the machine, and the credential works.
	in, err := u.Client.GetInstall(ctx, u.Workspace, cred.InstallID)
	if err != nil || in.Name != "laptop" || in.AnchorFingerprint != fp || in.AnchorPublicKey != key || in.IssueToken != "" {
		t.Fatalf("install: %+v %v", in, err)
	}
	daemon := s.Client(cred.IssueToken)
	me, err := daemon.RuntimeInstall(ctx)
	if err != nil || me.ID != cred.InstallID || me.AnchorFingerprint != fp {
		t.Fatalf("runtime install: %+v %v", me, err)
	}
	jwt, err := daemon.RuntimeRelayToken(ctx)
	if err != nil || jwt.RelayURL != s.URL {
		t.Fatalf("relay token: %+v %v", jwt, err)
	}
	v := expect(t, do(t, s, "POST", "/api/runtime/internal/relay/validate", jwt.Token, `{"workspace_id":"`+u.Workspace+`","role":"workspace-daemon"}`), 200, "validate")
	if dataOf(v)["valid"] != true {
		t.Fatalf("validate: %s", v.Body)
	}
	expect(t, do(t, s, "POST", "/api/runtime/internal/relay/validate", jwt.Token, `{"role":"client"}`), 403, "wrong role")
	// The exchange counted as a sign of life.
	if in, _ := u.Client.GetInstall(ctx, u.Workspace, cred.InstallID); in.LastSeenAt == nil {
		t.Fatal("relay-token exchange did not update last_seen_at")
	}
}

func TestDaemonMintedPairing(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	u := s.NewUser("owner@example.com")
	ctx := context.Background()
	key, fp := anchor(t)
	anon := s.Client("")

	expect(t, do(t, s, "POST", "/api/pairing-codes", "", `{"name":"box"}`), 422, "mint without an anchor")
	minted, err := anon.MintPairingCode(ctx, sdk.PairingMachineRequest{Name: "box", AnchorPublicKey: key, Worker: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(minted.Code) != api.CodeLength || minted.StatusToken == "" || minted.WorkspaceID != nil || minted.Machine.Transport != "polling" || minted.Machine.AnchorFingerprint != fp {
		t.Fatalf("minted: %+v", minted)
	}
	for _, r := range minted.Code {
		if strings.ContainsRune("01ILO", r) {
			t.Fatalf("code %q has an ambiguous character", minted.Code)
		}
	}
	// A daemon-minted code is not claimed by another daemon.
	expect(t, do(t, s, "POST", "/api/pairing-codes/"+minted.Code+"/claim", "", `{"anchor_public_key":"`+key+`"}`), 401, "a daemon claims a daemon's code")
	expect(t, do(t, s, "POST", "/api/pairing-codes/"+minted.Code+"/approve", u.Token, `{}`), 422, "approve without a workspace")
	expect(t, do(t, s, "POST", "/api/pairing-codes/"+minted.Code+"/approve", u.Token, `{"workspace":"01ARZ3NDEKTSV4RRFFQ69G5FAV"}`), 404, "approve into a missing workspace")
	if st, err := anon.PairingStatus(ctx, minted.Code, minted.StatusToken); err != nil || st.State != sdk.PairingPending {
		t.Fatalf("status: %+v %v", st, err)
	}
	got, err := u.Client.ApprovePairingCode(ctx, minted.Code, sdk.PairingDecisionRequest{Workspace: u.Workspace})
	if err != nil || got.State != sdk.PairingApproved || got.InstallID == "" || got.RelayCredentials != nil {
		t.Fatalf("approve: %+v %v", got, err)
	}
	st, err := anon.PairingStatus(ctx, minted.Code, minted.StatusToken)
	if err != nil || st.RelayCredentials == nil || st.RelayCredentials.InstallID != got.InstallID {
		t.Fatalf("status after approval: %+v %v", st, err)
	}
	if _, err := s.Client(st.RelayCredentials.IssueToken).RuntimeRelayToken(ctx); err != nil {
		t.Fatalf("relay token: %v", err)
	}
	// The code is spent.
	expect(t, do(t, s, "POST", "/api/pairing-codes/"+minted.Code+"/approve", u.Token, `{"workspace":"`+u.Workspace+`"}`), 409, "approve a spent code")
	expect(t, do(t, s, "POST", "/api/pairing-codes/"+minted.Code+"/claim", u.Token, `{"workspace":"`+u.Workspace+`"}`), 409, "claim a spent code")

	// The spec's swapped roles: a user claims a daemon's code for a
	// workspace, then approves it.
	minted2, _ := anon.MintPairingCode(ctx, sdk.PairingMachineRequest{Name: "box2", AnchorPublicKey: key})
	if _, err := u.Client.ClaimPairingCodeForWorkspace(ctx, minted2.Code, u.Workspace); err != nil {
		t.Fatal(err)
	}
	if _, err := u.Client.ApprovePairingCode(ctx, minted2.Code, sdk.PairingDecisionRequest{}); err != nil {
		t.Fatal(err)
	}
}

// A second approval for the same machine retires the first install at once:
// its issue token and its relay JWTs stop working. Other machines keep
// theirs.
func TestSecondApprovalRetiresFirstInstall(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	u := s.NewUser("owner@example.com")
	ctx := context.Background()
	key, fp := anchor(t)
	otherKey, _ := anchor(t)

	pair := func(key, name string) sdk.RelayCredentials {
		t.Helper()
		m, err := s.Client("").MintPairingCode(ctx, sdk.PairingMachineRequest{Name: name, AnchorPublicKey: key})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := u.Client.ApprovePairingCode(ctx, m.Code, sdk.PairingDecisionRequest{Workspace: u.Workspace}); err != nil {
			t.Fatal(err)
		}
		st, err := s.Client("").PairingStatus(ctx, m.Code, m.StatusToken)
		if err != nil || st.RelayCredentials == nil {
			t.Fatalf("status: %+v %v", st, err)
		}
		return *st.RelayCredentials
	}
	first := pair(key, "laptop")
	bystander := pair(otherKey, "desktop")
	firstJWT, err := s.Client(first.IssueToken).RuntimeRelayToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	validate := `{"workspace_id":"` + u.Workspace + `","role":"workspace-daemon"}`
	expect(t, do(t, s, "POST", "/api/runtime/internal/relay/validate", firstJWT.Token, validate), 200, "first JWT before retirement")

	second := pair(key, "laptop (reinstalled)")
	if second.InstallID == first.InstallID {
		t.Fatal("the second approval reused the install")
	}
	expect(t, do(t, s, "POST", "/api/runtime/relay-token", first.IssueToken, `{}`), 401, "retired issue token")
	expect(t, do(t, s, "POST", "/api/runtime/internal/relay/validate", firstJWT.Token, validate), 401, "retired install's JWT")
	if _, err := s.Client(second.IssueToken).RuntimeRelayToken(ctx); err != nil {
		t.Fatalf("new install: %v", err)
	}
	if _, err := s.Client(bystander.IssueToken).RuntimeRelayToken(ctx); err != nil {
		t.Fatalf("another machine's install was retired: %v", err)
	}
	list, err := u.Client.ListInstalls(ctx, u.Workspace)
	if err != nil || len(list) != 2 {
		t.Fatalf("installs: %+v %v", list, err)
	}
	for _, in := range list {
		if in.ID == first.InstallID {
			t.Fatal("the retired install is still listed")
		}
		if in.ID == second.InstallID && in.AnchorFingerprint != fp {
			t.Fatalf("install machine: %+v", in)
		}
	}
	expect(t, do(t, s, "GET", "/api/workspaces/"+u.Workspace+"/installs/"+first.InstallID, u.Token, nil), 404, "read the retired install")
	audit := expect(t, do(t, s, "GET", "/api/workspaces/"+u.Workspace+"/audit", u.Token, nil), 200, "audit")
	if !strings.Contains(string(audit.Body), `"install.retire"`) || !strings.Contains(string(audit.Body), `"pairing.approve"`) {
		t.Fatalf("audit lacks the retirement: %s", audit.Body)
	}
}

func TestDetachedInstallRefusedAtOnce(t *testing.T) {
	// A long credential cache shows that detaching does not wait for it.
	s := servertest.Start(t, servertest.Options{CacheTTL: time.Hour})
	u := s.NewUser("owner@example.com")
	ctx := context.Background()
	key, _ := anchor(t)
	m, _ := s.Client("").MintPairingCode(ctx, sdk.PairingMachineRequest{Name: "box", AnchorPublicKey: key})
	if _, err := u.Client.ApprovePairingCode(ctx, m.Code, sdk.PairingDecisionRequest{Workspace: u.Workspace}); err != nil {
		t.Fatal(err)
	}
	st, _ := s.Client("").PairingStatus(ctx, m.Code, m.StatusToken)
	cred := st.RelayCredentials
	daemon := s.Client(cred.IssueToken)
	jwt, err := daemon.RuntimeRelayToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Heartbeats: only the install itself, with its own token.
	if in, err := daemon.Heartbeat(ctx, u.Workspace, cred.InstallID); err != nil || in.LastSeenAt == nil {
		t.Fatalf("heartbeat: %+v %v", in, err)
	}
	expect(t, do(t, s, "POST", "/api/workspaces/"+u.Workspace+"/installs/"+cred.InstallID+"/heartbeat", u.Token, `{}`), 401, "heartbeat with a user token")
	other, _ := u.Client.CreateInstall(ctx, u.Workspace, "other")
	expect(t, do(t, s, "POST", "/api/workspaces/"+u.Workspace+"/installs/"+cred.InstallID+"/heartbeat", other.IssueToken, `{}`), 403, "heartbeat for another install")
	validate := `{"workspace_id":"` + u.Workspace + `","role":"workspace-daemon"}`
	expect(t, do(t, s, "POST", "/api/runtime/internal/relay/validate", jwt.Token, validate), 200, "JWT before detach")

	if err := u.Client.DetachInstall(ctx, u.Workspace, cred.InstallID); err != nil {
		t.Fatal(err)
	}
	expect(t, do(t, s, "POST", "/api/runtime/relay-token", cred.IssueToken, `{}`), 401, "detached issue token")
	expect(t, do(t, s, "GET", "/api/runtime/install", cred.IssueToken, nil), 401, "detached install reads itself")
	expect(t, do(t, s, "POST", "/api/runtime/internal/relay/validate", jwt.Token, validate), 401, "detached install's JWT")
	expect(t, do(t, s, "POST", "/api/workspaces/"+u.Workspace+"/installs/"+cred.InstallID+"/heartbeat", cred.IssueToken, `{}`), 401, "detached heartbeat")
	expect(t, do(t, s, "DELETE", "/api/workspaces/"+u.Workspace+"/installs/"+cred.InstallID, u.Token, nil), 404, "detach twice")
	// A credential collected after detachment is refused too.
	m2, _ := s.Client("").MintPairingCode(ctx, sdk.PairingMachineRequest{Name: "box", AnchorPublicKey: key})
	a2, _ := u.Client.ApprovePairingCode(ctx, m2.Code, sdk.PairingDecisionRequest{Workspace: u.Workspace})
	if err := u.Client.DetachInstall(ctx, u.Workspace, a2.InstallID); err != nil {
		t.Fatal(err)
	}
	expect(t, do(t, s, "GET", "/api/pairing-codes/"+m2.Code+"/status", m2.StatusToken, nil), 409, "collect after detach")
}

func TestDenyPairing(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	u := s.NewUser("owner@example.com")
	stranger := s.NewUser("stranger@example.com")
	ctx := context.Background()
	key, _ := anchor(t)

	// A browser-minted code: only an admin of its workspace may deny.
	code, _ := u.Client.CreateWorkspacePairingCode(ctx, u.Workspace, sdk.WorkspacePairingCodeRequest{})
	claim, err := s.Client("").ClaimPairingCode(ctx, code.Code, sdk.PairingMachineRequest{Name: "unknown box", AnchorPublicKey: key})
	if err != nil {
		t.Fatal(err)
	}
	expect(t, do(t, s, "POST", "/api/pairing-codes/"+code.Code+"/deny", stranger.Token, `{}`), 403, "stranger denies")
	d, err := u.Client.DenyPairingCode(ctx, code.Code, sdk.PairingDecisionRequest{})
	if err != nil || d.State != sdk.PairingDenied {
		t.Fatalf("deny: %+v %v", d, err)
	}
	st, err := s.Client("").PairingStatus(ctx, code.Code, claim.StatusToken)
	if err != nil || st.State != sdk.PairingDenied || st.RelayCredentials != nil {
		t.Fatalf("status after deny: %+v %v", st, err)
	}
	expect(t, do(t, s, "POST", "/api/pairing-codes/"+code.Code+"/approve", u.Token, `{}`), 409, "approve after deny")
	if list, _ := u.Client.ListInstalls(ctx, u.Workspace); len(list) != 0 {
		t.Fatalf("a denied machine got an install: %+v", list)
	}
	// An unbound daemon-minted code: anyone signed in who has it may refuse.
	m, _ := s.Client("").MintPairingCode(ctx, sdk.PairingMachineRequest{AnchorPublicKey: key})
	if _, err := stranger.Client.DenyPairingCode(ctx, m.Code, sdk.PairingDecisionRequest{}); err != nil {
		t.Fatal(err)
	}
}

// Expiry is tested against a server with a controlled clock.
func TestExpiredCodesRefused(t *testing.T) {
	ctx := context.Background()
	st, err := store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var (
		mu  sync.Mutex
		now = time.Now()
	)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	ring, err := secrets.Parse(strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := api.New(api.Options{Store: st, Secrets: ring, Now: clock, CacheTTL: -1, Signer: &auth.RelaySigner{Key: []byte(strings.Repeat("k", 32)), Issuer: "http://cp", Now: clock}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	uid, _, err := st.EnsureUser(ctx, "owner@example.com")
	if err != nil {
		t.Fatal(err)
	}
	ws, err := api.CreateWorkspace(ctx, st, uid.ID, "w", nil, clock())
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := api.MintUserToken(ctx, st, uid.ID, store.TokenPersonal, "t", 0, clock())
	if err != nil {
		t.Fatal(err)
	}
	user := &sdk.Client{BaseURL: hs.URL, Token: tok}
	anon := &sdk.Client{BaseURL: hs.URL}
	key, _ := anchor(t)
	status := func(err error) int {
		t.Helper()
		var ae *sdk.APIError
		if err == nil {
			return 200
		}
		if !asAPIError(err, &ae) {
			t.Fatalf("not an API error: %v", err)
		}
		return ae.Status
	}

	// Daemon-minted: 15 minutes.
	m, err := anon.MintPairingCode(ctx, sdk.PairingMachineRequest{AnchorPublicKey: key})
	if err != nil {
		t.Fatal(err)
	}
	if d := m.ExpiresAt.Sub(clock()); d < 14*time.Minute || d > 15*time.Minute {
		t.Fatalf("expires in %v", d)
	}
	// Browser-minted with a short life.
	b, err := user.CreateWorkspacePairingCode(ctx, ws.ID, sdk.WorkspacePairingCodeRequest{ExpiresInSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := user.CreateWorkspacePairingCode(ctx, ws.ID, sdk.WorkspacePairingCodeRequest{ExpiresInSeconds: 7200}); status(err) != 422 {
		t.Fatalf("a two-hour code: %v", err)
	}
	advance(61 * time.Second)
	_, err = anon.ClaimPairingCode(ctx, b.Code, sdk.PairingMachineRequest{AnchorPublicKey: key})
	if status(err) != 410 || !sdk.IsCode(err, sdk.CodeExpired) {
		t.Fatalf("claim an expired code: %v", err)
	}
	if _, err := anon.PairingStatus(ctx, m.Code, m.StatusToken); err != nil {
		t.Fatalf("the 15-minute code expired early: %v", err)
	}
	advance(15 * time.Minute)
	if _, err := anon.PairingStatus(ctx, m.Code, m.StatusToken); status(err) != 410 {
		t.Fatalf("status of an expired code: %v", err)
	}
	if _, err := user.ApprovePairingCode(ctx, m.Code, sdk.PairingDecisionRequest{Workspace: ws.ID}); status(err) != 410 {
		t.Fatalf("approve an expired code: %v", err)
	}
	if _, err := user.GetPairingCode(ctx, m.Code); status(err) != 410 {
		t.Fatalf("show an expired code: %v", err)
	}

	// An approved code still delivers after its expiry: the decision was
	// made in time.
	m2, _ := anon.MintPairingCode(ctx, sdk.PairingMachineRequest{AnchorPublicKey: key})
	if _, err := user.ApprovePairingCode(ctx, m2.Code, sdk.PairingDecisionRequest{Workspace: ws.ID}); err != nil {
		t.Fatal(err)
	}
	advance(20 * time.Minute)
	if got, err := anon.PairingStatus(ctx, m2.Code, m2.StatusToken); err != nil || got.RelayCredentials == nil {
		t.Fatalf("late collection: %+v %v", got, err)
	}
}

func asAPIError(err error, ae **sdk.APIError) bool {
	e, ok := err.(*sdk.APIError)
	if ok {
		*ae = e
	}
	return ok
}

// Guessing is throttled: unknown codes and wrong status tokens from one
// address run out, and a code whose status token is guessed at locks.
func TestPairingGuessingThrottled(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	ctx := context.Background()
	key, _ := anchor(t)
	m, err := s.Client("").MintPairingCode(ctx, sdk.PairingMachineRequest{AnchorPublicKey: key})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		expect(t, do(t, s, "GET", "/api/pairing-codes/"+m.Code+"/status", "rvt_guess", nil), 401, "wrong status token "+string(rune('1'+i)))
	}
	locked := expect(t, do(t, s, "GET", "/api/pairing-codes/"+m.Code+"/status", m.StatusToken, nil), 429, "the code after five wrong tokens")
	if locked.Header.Get("Retry-After") == "" {
		t.Fatal("429 without Retry-After")
	}
	// The address has five failures left for unknown codes.
	guesses := []string{"AAAAAAAA", "BBBBBBBB", "CCCCCCCC", "DDDDDDDD", "EEEEEEEE"}
	for _, g := range guesses {
		expect(t, do(t, s, "POST", "/api/pairing-codes/"+g+"/claim", "", `{"anchor_public_key":"`+key+`"}`), 404, "guess "+g)
	}
	limited := expect(t, do(t, s, "POST", "/api/pairing-codes/FFFFFFFF/claim", "", `{"anchor_public_key":"`+key+`"}`), 429, "guess after ten failures")
	if ra := limited.Header.Get("Retry-After"); ra == "" || ra == "0" {
		t.Fatalf("Retry-After %q", ra)
	}
	var ae *sdk.APIError
	if _, err := s.Client("").ClaimPairingCode(ctx, "GGGGGGGG", sdk.PairingMachineRequest{AnchorPublicKey: key}); !asAPIError(err, &ae) || ae.Status != 429 || ae.RetryAfter <= 0 {
		t.Fatalf("sdk sees the throttle: %v", err)
	}
}
