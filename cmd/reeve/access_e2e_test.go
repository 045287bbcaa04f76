package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"reeve.dev/reeve/agents/agenttest"
	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/sdk/accesstoken"
	"reeve.dev/reeve/server/sdk/remote"
)

// Who may do what is decided on the daemon: every request type, from a
// viewer, a steerer, an approver (session ACL grants on the control plane)
// and the workspace owner, through `reeve server`'s relay with the Go
// remote client against a paired daemon running a real Claude Code session
// (scripted model) with a pending Bash request. A viewer's Allow is refused
// by the daemon and audited in the session's log; the approver's is
// decided. Then tokens that must not work: none, forged, signed by a key
// the daemon never learned, and a relay token without an access token.
func TestRemoteAccessMatrix(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	data, serverURL, owner, ws := ownedServer(t, "owner@example.com")

	srv := agenttest.NewAnthropicServer(t, agenttest.AnthropicOptions{Turns: []agenttest.Turn{
		{Text: "touching", Calls: []agenttest.ToolCall{agenttest.Bash("touch allowed.txt")}},
		{Text: "done"},
	}})
	h := claudeHome(t, srv)
	creds := pairToServer(t, ctx, h, owner, serverURL, ws)
	fingerprint := strings.TrimSpace(h.must("pair", "anchor").stdout)

	work := t.TempDir()
	sid := strings.TrimSpace(h.must("run", work, "--agent", "claude", "--prompt", "make one").stdout)
	waitFor(t, "a pending request", 90*time.Second, func() bool { return len(h.pending()) == 1 })
	pid := h.pending()[0].ID

	// The session reaches the control plane (session sync); grants name
	// its record there.
	var rec string
	waitFor(t, "the session's record on the control plane", 90*time.Second, func() bool {
		var l sdk.RecordCollectionResponse
		if _, err := owner.Do(ctx, http.MethodGet, "/api/resources/"+ws+"/sessions", nil, &l); err != nil {
			return false
		}
		for _, r := range l.Data {
			if r.Attributes["daemon_session_id"] == sid {
				rec = r.ID
				return true
			}
		}
		return false
	})
	users := map[string]*sdk.Client{sdk.SessionOwner: owner}
	for _, role := range []string{sdk.SessionViewer, sdk.SessionSteerer, sdk.SessionApprover} {
		email := role + "@example.com"
		u := operatorClient(t, data, serverURL, email)
		inv, err := owner.CreateInvitation(ctx, ws, sdk.InvitationCreateRequest{Email: email, Role: sdk.RoleMember})
		if err != nil {
			t.Fatal(err)
		}
		acc, err := u.AcceptInvitation(ctx, inv.Token)
		if err != nil {
			t.Fatal(err)
		}
		if role != sdk.SessionViewer { // a viewer has the workspace's visibility only
			body := map[string]any{"subject_type": "user", "subject_id": acc.UserID, "role": role}
			if _, err := owner.Do(ctx, http.MethodPost, "/api/resources/"+ws+"/sessions/"+rec+"/access", body, nil); err != nil {
				t.Fatalf("grant %s: %v", role, err)
			}
		}
		users[role] = u
	}

	dial := func(u *sdk.Client, access remote.TokenSource) *remote.Client {
		t.Helper()
		c, err := remote.Dial(ctx, remote.Options{
			RelayURL: creds.RelayURL, WorkspaceID: ws, RuntimeTargetID: creds.InstallID, Fingerprint: fingerprint,
			Token: remote.WorkspaceToken(u, ws), AccessToken: access, NoReconnect: true, Logf: t.Logf,
		})
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	forbidden := func(err error) bool {
		var ae *wire.AckError
		return errors.As(err, &ae) && ae.Code == wire.CodeForbidden
	}
	const nosuch = "01NOSUCHSESSION"
	// Every request type but respond-permission and kill, which change the
	// session for good and come last. Destructive owner operations name a
	// session that does not exist for the owner (the access check passes,
	// the handler answers not found) and the real one for everyone else.
	type probe struct {
		typ string
		req func(role string) wire.Request
	}
	target := func(role string) string {
		if role == sdk.SessionOwner {
			return nosuch
		}
		return sid
	}
	probes := []probe{
		{wire.TypeList, func(string) wire.Request { return &wire.ListRequest{Scope: wire.ScopeActive} }},
		{wire.TypeSubscribe, func(string) wire.Request { return &wire.SubscribeRequest{SessionID: sid, AfterSeq: 1 << 40} }},
		{wire.TypeUnsubscribe, func(string) wire.Request { return &wire.UnsubscribeRequest{SessionID: sid} }},
		{wire.TypeLaunch, func(string) wire.Request {
			return &wire.LaunchRequest{Directory: work, Agent: "no-such-agent", Prompt: "x"}
		}},
		{wire.TypePrompt, func(string) wire.Request { return &wire.PromptRequest{SessionID: sid, Text: "hello"} }},
		{wire.TypeSetMode, func(r string) wire.Request { return &wire.SetModeRequest{SessionID: target(r), Mode: "bypass"} }},
		{wire.TypeWorktreeList, func(string) wire.Request { return &wire.WorktreeListRequest{SessionID: sid} }},
		{wire.TypeWorktreeDiff, func(string) wire.Request { return &wire.WorktreeDiffRequest{SessionID: sid} }},
		{wire.TypeWorktreeSummary, func(string) wire.Request { return &wire.WorktreeSummaryRequest{SessionID: sid} }},
		{wire.TypeRollback, func(r string) wire.Request { return &wire.RollbackRequest{SessionID: target(r), SHA: "0000000"} }},
		{wire.TypeBranchRetry, func(r string) wire.Request { return &wire.BranchRetryRequest{SessionID: target(r), SHA: "0000000"} }},
		{wire.TypeSquashMerge, func(r string) wire.Request { return &wire.SquashMergeRequest{SessionID: target(r)} }},
		{wire.TypeWorktreeRemove, func(r string) wire.Request { return &wire.WorktreeRemoveRequest{SessionID: target(r)} }},
	}
	rank := map[string]int{sdk.SessionViewer: 1, sdk.SessionSteerer: 3, sdk.SessionApprover: 4, sdk.SessionOwner: 5}
	needs := map[string]string{
		wire.TypeList: sdk.SessionViewer, wire.TypeSubscribe: sdk.SessionViewer, wire.TypeUnsubscribe: sdk.SessionViewer,
		wire.TypeLaunch: sdk.SessionOwner, // no .reeve/access.yaml: workspace owners and admins launch
		wire.TypePrompt: sdk.SessionSteerer, wire.TypeSetMode: sdk.SessionOwner,
		wire.TypeWorktreeList: sdk.SessionViewer, wire.TypeWorktreeDiff: sdk.SessionViewer, wire.TypeWorktreeSummary: sdk.SessionViewer,
		wire.TypeRollback: sdk.SessionOwner, wire.TypeBranchRetry: sdk.SessionOwner, wire.TypeSquashMerge: sdk.SessionOwner, wire.TypeWorktreeRemove: sdk.SessionOwner,
	}
	clients := map[string]*remote.Client{}
	for _, role := range []string{sdk.SessionViewer, sdk.SessionSteerer, sdk.SessionApprover, sdk.SessionOwner} {
		c := dial(users[role], nil)
		clients[role] = c
		for _, pr := range probes {
			err := c.Call(ctx, pr.req(role), nil)
			want := rank[role] >= rank[needs[pr.typ]]
			if want && forbidden(err) {
				t.Errorf("%s: %s was refused: %v", role, pr.typ, err)
			}
			if !want && !forbidden(err) {
				t.Errorf("%s: %s was not refused (%v)", role, pr.typ, err)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s: %s: %v", role, pr.typ, err)
			}
		}
	}

	// A viewer's and a steerer's Allow are refused by the daemon, with the
	// reason, and the request still waits.
	for _, role := range []string{sdk.SessionViewer, sdk.SessionSteerer} {
		_, err := clients[role].RespondPermission(ctx, wire.RespondPermissionRequest{RequestID: pid, Decision: "allow"})
		if !forbidden(err) || !strings.Contains(err.Error(), "approver") {
			t.Fatalf("%s's allow: %v", role, err)
		}
	}
	if len(h.pending()) != 1 {
		t.Fatal("a refused allow decided the request")
	}
	refused := 0
	for _, e := range h.logEvents(sid) {
		if e.Kind == "access-refused" {
			refused++
		}
	}
	if refused < 2 {
		t.Fatalf("the session's log has %d access-refused events", refused)
	}
	// The approver's Allow decides it, and the tool runs.
	if d, err := clients[sdk.SessionApprover].RespondPermission(ctx, wire.RespondPermissionRequest{RequestID: pid, Decision: "allow"}); err != nil || d.Decision != "allow" {
		t.Fatalf("approver's allow: %+v %v", d, err)
	}
	if r := h.run("wait", sid, "--timeout", "90"); r.code != 0 {
		t.Fatalf("wait: %d %s", r.code, r.stderr)
	}
	// kill: a viewer is refused, a steerer passes (the session has ended).
	if err := clients[sdk.SessionViewer].Kill(ctx, wire.KillRequest{SessionID: sid}); !forbidden(err) {
		t.Fatalf("viewer's kill: %v", err)
	}
	if err := clients[sdk.SessionSteerer].Kill(ctx, wire.KillRequest{SessionID: sid}); forbidden(err) {
		t.Fatalf("steerer's kill: %v", err)
	}

	// Tokens that must not work.
	real := func(ctx context.Context) (string, error) {
		var r sdk.RelayTokenResponse
		_, err := users[sdk.SessionViewer].Do(ctx, http.MethodPost, "/api/workspaces/"+ws+"/relay-token", map[string]any{"runtime_target_id": creds.InstallID}, &r)
		return r.Data.AccessToken, err
	}
	forged := func(ctx context.Context) (string, error) {
		tok, err := real(ctx)
		if err != nil {
			return "", err
		}
		parts := strings.Split(tok, ".")
		claims, _ := base64.RawURLEncoding.DecodeString(parts[1])
		claims = []byte(strings.Replace(string(claims), `"srole":"viewer"`, `"srole":"owner"`, 1))
		return parts[0] + "." + base64.RawURLEncoding.EncodeToString(claims) + "." + parts[2], nil
	}
	unknownKey := func(context.Context) (string, error) {
		_, priv, _ := ed25519.GenerateKey(rand.Reader)
		c := accesstoken.Claims{WorkspaceID: ws, RuntimeTargetID: creds.InstallID, WorkspaceRole: sdk.RoleOwner, DefaultSessionRole: sdk.SessionOwner}
		c.Subject, c.ExpiresAt = "user:1", jwt.NewNumericDate(time.Now().Add(time.Hour))
		input, err := accesstoken.SigningInput("ev-attacker", c)
		if err != nil {
			return "", err
		}
		return input + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, []byte(input))), nil
	}
	none := func(context.Context) (string, error) { return "", nil }
	for name, tc := range map[string]struct {
		src  remote.TokenSource
		want string
	}{
		"forged":      {forged, "signature does not verify"},
		"unknown key": {unknownKey, "never learned"},
		"none":        {none, "no access token"},
	} {
		c := dial(users[sdk.SessionViewer], tc.src)
		_, _, err := c.List(ctx, wire.ListRequest{})
		if !forbidden(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s token: list answered %v, want a refusal saying %q", name, err, tc.want)
		}
		c.Close()
	}
}
