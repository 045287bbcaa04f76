package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
	"reeve.dev/reeve/server/store"
	"reeve.dev/reeve/server/store/storetest"
)

// insightWorld is a workspace whose records trigger every detection rule:
// a paired laptop synced two sessions (one unguarded) with four denials
// of Bash and two of Write; a second machine was last seen nine days ago;
// the ledger holds $8.50 of a $10.00 cap; three runs of one workflow and
// two of another failed.
type insightWorld struct {
	s                    *servertest.Server
	owner, admin, member servertest.User
	laptop, oldBox       string // install ids
	daemon               string // the laptop's token
	unguardedSession     string // session record id
	runs                 []string
	ri                   string // /api/resources/{ws}/insights
}

func syncSession(t *testing.T, s *servertest.Server, daemon, id string, guarded bool, decisions ...[2]string) {
	t.Helper()
	now := time.Now().UTC()
	sess := map[string]any{"id": id, "agent": "claude", "status": "exited", "turns": 1, "created_at": now, "updated_at": now, "guarded": guarded, "mode": map[bool]string{true: "default", false: "bypass"}[guarded]}
	var events []map[string]any
	for i, d := range decisions {
		events = append(events, map[string]any{"seq": i + 1, "kind": "permission-decision", "ts": now,
			"data": map[string]any{"request_id": fmt.Sprint(i), "tool": d[0], "decision": d[1], "decided_by": "policy:no-shell", "at": now}})
	}
	if events == nil {
		events = []map[string]any{}
	}
	expect(t, do(t, s, "POST", "/api/runtime/agent-sessions/sync", daemon, map[string]any{"session": sess, "events": events}), 200, "sync "+id)
}

func newInsightWorld(t *testing.T, o servertest.Options) *insightWorld {
	t.Helper()
	s := servertest.Start(t, o)
	w := &insightWorld{s: s, owner: s.NewUser("owner@insights.example")}
	ws := w.owner.Workspace
	w.admin = s.AddMember(ws, "admin@insights.example", "admin")
	w.member = s.AddMember(ws, "member@insights.example", "member")
	w.ri = "/api/resources/" + ws + "/insights"
	ctx := context.Background()

	lap := dataOf(expect(t, do(t, s, "POST", "/api/workspaces/"+ws+"/installs", w.owner.Token, map[string]any{"name": "laptop"}), 201, "install"))
	w.laptop = lap["id"].(string)
	daemon := lap["issue_token"].(string)
	w.daemon = daemon
	syncSession(t, s, daemon, "s-unguarded", false, [2]string{"Bash", "deny"}, [2]string{"Bash", "deny"}, [2]string{"Bash", "allow"}, [2]string{"Write", "deny"}, [2]string{"Bash", "deny"})
	syncSession(t, s, daemon, "s-guarded", true, [2]string{"Bash", "deny"}, [2]string{"Write", "deny"})
	sessions := expect(t, do(t, s, "GET", "/api/resources/"+ws+"/sessions", w.owner.Token, nil), 200, "sessions")
	for _, x := range sessions.JSON["data"].([]any) {
		r := x.(map[string]any)
		if a, _ := r["attributes"].(map[string]any); a["daemon_session_id"] == "s-unguarded" {
			w.unguardedSession = r["id"].(string)
		}
	}
	if w.unguardedSession == "" {
		t.Fatalf("synced session not listed: %s", sessions.Body)
	}

	old := dataOf(expect(t, do(t, s, "POST", "/api/workspaces/"+ws+"/installs", w.owner.Token, map[string]any{"name": "old-box"}), 201, "install"))
	w.oldBox = old["id"].(string)
	if err := s.Store().TouchInstall(ctx, w.oldBox, time.Now().Add(-9*24*time.Hour)); err != nil {
		t.Fatal(err)
	}

	expect(t, do(t, s, "PATCH", "/api/workspaces/"+ws, w.owner.Token, `{"budget_policy":{"hard_cap_usd":"10.00"}}`), 200, "cap")
	expect(t, doRuntime(t, s, "POST", "/api/runtime/internal/gateway/workspaces/"+ws+"/usage", daemon, gatewayUsageBody("spend-1", "8.50")), 201, "usage")

	wf := s.Store().(store.Workflows)
	now := time.Now().UTC().Truncate(time.Millisecond)
	for i, def := range []string{"nightly", "nightly", "weekly", "nightly", "weekly"} {
		r := store.WorkflowRun{ID: fmt.Sprintf("01RUNINSIGHT%s%02d%s", strings.ToUpper(ws[len(ws)-6:]), i, "000000"), WorkspaceID: ws, Status: "queued", Agent: "claude",
			Tags: []string{}, MaxAttempts: 1, Spec: json.RawMessage(`{"prompt":"p","definition":"` + def + `"}`), CreatedBy: "user:1", CreatedAt: now, UpdatedAt: now}
		if err := wf.CreateRun(ctx, &r, nil, store.AuditEntry{}); err != nil {
			t.Fatal(err)
		}
		if _, err := wf.UpdateRun(ctx, ws, r.ID, func(r *store.WorkflowRun) ([]store.RunEvent, error) {
			r.Status, r.FinishedAt, r.Outcome = "failed", &now, json.RawMessage(`{"error":"tests failed"}`)
			return nil, nil
		}, store.AuditEntry{}); err != nil {
			t.Fatal(err)
		}
		if def == "nightly" {
			w.runs = append(w.runs, r.ID)
		}
	}
	return w
}

func insightsBy(t *testing.T, a answer) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, x := range a.JSON["data"].([]any) {
		i := x.(map[string]any)
		out[i["rule"].(string)+" "+i["subject"].(string)] = i
	}
	return out
}

func evidenceKinds(i map[string]any) map[string][]string {
	out := map[string][]string{}
	for _, x := range i["evidence"].([]any) {
		l := x.(map[string]any)
		out[l["kind"].(string)] = append(out[l["kind"].(string)], l["id"].(string))
	}
	return out
}

func TestInsightsEndToEnd(t *testing.T) {
	// The server's own detection is off: these servers detect when asked.
	t.Run("sqlite", func(t *testing.T) { testInsights(t, servertest.Options{InsightInterval: -1}) })
	t.Run("postgres", func(t *testing.T) {
		testInsights(t, servertest.Options{InsightInterval: -1, DatabaseURL: storetest.PostgresURL(t)})
	})
}

func testInsights(t *testing.T, o servertest.Options) {
	w := newInsightWorld(t, o)
	s, ws, ri := w.s, w.owner.Workspace, w.ri

	// Members read but do not detect; nothing exists before detection.
	expect(t, do(t, s, "POST", ri+"/detect", w.member.Token, nil), 403, "member detects")
	if l := expect(t, do(t, s, "GET", ri, w.member.Token, nil), 200, "member lists"); len(l.JSON["data"].([]any)) != 0 {
		t.Fatalf("insights before detection: %s", l.Body)
	}

	// Detection: every rule fires from the records above, and only those.
	d := expect(t, do(t, s, "POST", ri+"/detect", w.admin.Token, nil), 201, "detect")
	got := insightsBy(t, d)
	if len(got) != 5 {
		t.Fatalf("want 5 insights, got %d: %s", len(got), d.Body)
	}
	bash := got["repeated_denials tool:Bash"]
	if bash == nil || bash["count"].(float64) != 4 || bash["status"] != "open" {
		t.Fatalf("Bash denials: %v", bash)
	}
	ek := evidenceKinds(bash)
	if len(ek["session"]) != 2 || len(ek["audit"]) != 4 {
		t.Fatalf("Bash denial evidence: %v", ek)
	}
	audit := expect(t, do(t, s, "GET", "/api/workspaces/"+ws+"/audit?limit=1000", w.owner.Token, nil), 200, "audit")
	for _, id := range ek["audit"] {
		if !strings.Contains(string(audit.Body), id) {
			t.Fatalf("evidence names audit entry %s, which the audit log does not hold", id)
		}
	}
	if !strings.Contains(string(audit.Body), `"insights.detect"`) {
		t.Fatal("detection is not audited")
	}
	if got["repeated_denials tool:Write"] != nil {
		t.Fatal("two denials of Write raised an insight (threshold 3)")
	}
	budget := got["budget_near_cap period:"+time.Now().UTC().Format("2006-01")]
	if budget == nil || evidenceKinds(budget)["ledger_period"] == nil || budget["detail"].(map[string]any)["spent_usd"] != "8.50" {
		t.Fatalf("budget: %v", budget)
	}
	stale := got["install_stale install:"+w.oldBox]
	if stale == nil || evidenceKinds(stale)["install"][0] != w.oldBox || !strings.Contains(stale["title"].(string), "9 days") {
		t.Fatalf("stale install: %v", stale)
	}
	if got["install_stale install:"+w.laptop] != nil {
		t.Fatal("the machine that just synced is called stale")
	}
	runs := got["runs_failing workflow:nightly"]
	if runs == nil || runs["count"].(float64) != 3 || len(evidenceKinds(runs)["run"]) != 3 {
		t.Fatalf("failing runs: %v", runs)
	}
	ung := got["unguarded_session install:"+w.laptop]
	if ung == nil || ung["count"].(float64) != 1 || evidenceKinds(ung)["session"][0] != w.unguardedSession {
		t.Fatalf("unguarded: %v", ung)
	}

	// Idempotent: again, and twenty at once, change nothing.
	again := expect(t, do(t, s, "POST", ri+"/detect", w.owner.Token, nil), 200, "detect again")
	if m := again.JSON["meta"].(map[string]any); m["created"].(float64) != 0 || m["unchanged"].(float64) != 5 {
		t.Fatalf("second detection: %v", m)
	}
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if a := do(t, s, "POST", ri+"/detect", w.admin.Token, nil); a.Status != 200 {
				t.Errorf("concurrent detect: %d %s", a.Status, a.Body)
			}
		}()
	}
	wg.Wait()
	if l := expect(t, do(t, s, "GET", ri+"?limit=1000", w.member.Token, nil), 200, "list"); len(l.JSON["data"].([]any)) != 5 {
		t.Fatalf("after 22 detections: %d insights", len(l.JSON["data"].([]any)))
	}
	// The twin spelling is the same operation (header-selected workspace).
	expect(t, do(t, s, "POST", "/api/insights/detect", w.member.Token, nil, "X-Reeve-Workspace", ws), 403, "member detects through the twin")
	expect(t, do(t, s, "POST", "/api/insights/detect", w.admin.Token, nil, "X-Reeve-Workspace", ws), 200, "detect through the twin")
	expect(t, do(t, s, "GET", ri+"?status=bogus", w.member.Token, nil), 422, "bad status filter")
	if l := expect(t, do(t, s, "GET", ri+"?rule=install_stale", w.member.Token, nil), 200, "rule filter"); len(l.JSON["data"].([]any)) != 1 {
		t.Fatalf("rule filter: %s", l.Body)
	}

	// Status transitions.
	bid := bash["id"].(string)
	expect(t, do(t, s, "PATCH", ri+"/"+bid, w.member.Token, map[string]any{"status": "accepted"}), 403, "member accepts")
	expect(t, do(t, s, "PATCH", ri+"/NOPE", w.admin.Token, map[string]any{"status": "accepted"}), 404, "unknown insight")
	expect(t, do(t, s, "PATCH", ri+"/"+bid, w.admin.Token, map[string]any{"status": "converted"}), 422, "converted through PATCH")
	expect(t, do(t, s, "PATCH", ri+"/"+bid, w.admin.Token, map[string]any{"status": "accepted", "extra": 1}), 422, "unknown field")
	expect(t, do(t, s, "PATCH", ri+"/"+bid, w.admin.Token, map[string]any{"status": "open"}), 409, "open to open")
	expect(t, do(t, s, "POST", ri+"/"+bid+"/convert", w.admin.Token, nil), 409, "convert an open insight")
	expect(t, do(t, s, "POST", ri+"/NOPE/convert", w.admin.Token, nil), 404, "convert unknown")
	acc := expect(t, do(t, s, "PATCH", ri+"/"+bid, w.admin.Token, map[string]any{"status": "accepted", "reason": "we should allow read-only shell"}), 200, "accept")
	if dataOf(acc)["status"] != "accepted" || dataOf(acc)["status_changed_by"] == nil || dataOf(acc)["status_reason"] != "we should allow read-only shell" {
		t.Fatalf("accepted: %s", acc.Body)
	}
	expect(t, do(t, s, "POST", ri+"/"+bid+"/convert", w.member.Token, nil), 403, "member converts")
	conv := expect(t, do(t, s, "POST", ri+"/"+bid+"/convert", w.owner.Token, nil), 201, "convert")
	packet := dataOf(conv)
	if packet["status"] != "pending" || packet["insight_id"] != bid || len(packet["evidence"].([]any)) != 6 {
		t.Fatalf("packet: %s", conv.Body)
	}
	expect(t, do(t, s, "POST", ri+"/"+bid+"/convert", w.owner.Token, nil), 409, "convert twice")
	expect(t, do(t, s, "PATCH", ri+"/"+bid, w.owner.Token, map[string]any{"status": "open"}), 409, "reopen a converted insight")
	if g := insightsBy(t, expect(t, do(t, s, "GET", ri+"?status=converted", w.member.Token, nil), 200, "converted")); g["repeated_denials tool:Bash"]["review_packet_id"] != packet["id"] {
		t.Fatalf("converted insight does not name its packet: %v", g)
	}
	sid := stale["id"].(string)
	expect(t, do(t, s, "PATCH", ri+"/"+sid, w.admin.Token, map[string]any{"status": "dismissed"}), 200, "dismiss")
	expect(t, do(t, s, "PATCH", ri+"/"+sid, w.admin.Token, map[string]any{"status": "accepted"}), 409, "dismissed to accepted")
	// A dismissed insight is not raised again by the same evidence.
	if m := expect(t, do(t, s, "POST", ri+"/detect", w.admin.Token, nil), 200, "detect after dismissal").JSON["meta"].(map[string]any); m["created"].(float64) != 0 {
		t.Fatalf("dismissed insight came back: %v", m)
	}
	expect(t, do(t, s, "PATCH", ri+"/"+sid, w.admin.Token, map[string]any{"status": "open"}), 200, "reopen")

	// Another workspace sees none of it.
	other := s.NewUser("other@insights.example")
	expect(t, do(t, s, "GET", ri, other.Token, nil), 403, "outsider lists")
	expect(t, do(t, s, "PATCH", "/api/resources/"+other.Workspace+"/insights/"+sid, other.Token, map[string]any{"status": "dismissed"}), 404, "outsider patches through own workspace")
	expect(t, do(t, s, "POST", "/api/resources/"+other.Workspace+"/insights/"+bid+"/convert", other.Token, nil), 404, "outsider converts")
	if l := expect(t, do(t, s, "POST", "/api/resources/"+other.Workspace+"/insights/detect", other.Token, nil), 200, "outsider detects own"); len(l.JSON["data"].([]any)) != 0 {
		t.Fatalf("detection in an empty workspace found %s", l.Body)
	}

	// Summary: insights by rule and status; the ledger for admins only.
	sum := dataOf(expect(t, do(t, s, "GET", ri+"/summary", w.admin.Token, nil), 200, "summary"))
	if sum["total"].(float64) != 5 || sum["by_status"].(map[string]any)["converted"].(float64) != 1 || sum["review_packets"].(map[string]any)["pending"].(float64) != 1 {
		t.Fatalf("summary: %v", sum)
	}
	led, _ := sum["ledger"].(map[string]any)
	if led == nil || led["spent_usd"] != "8.50" || led["hard_cap_usd"] != "10.00" || led["remaining_usd"] != "1.50" || led["fraction_used"].(float64) != 0.85 {
		t.Fatalf("summary ledger: %v", sum["ledger"])
	}
	if ms := dataOf(expect(t, do(t, s, "GET", "/api/insights/summary", w.member.Token, nil, "X-Reeve-Workspace", ws), 200, "member summary")); ms["ledger"] != nil || ms["total"].(float64) != 5 {
		t.Fatalf("member summary: %v", ms)
	}

	testReviewPackets(t, w, packet["id"].(string))
}

func testReviewPackets(t *testing.T, w *insightWorld, converted string) {
	s, ws := w.s, w.owner.Workspace
	rp := "/api/resources/" + ws + "/review-packets"
	body := map[string]any{"title": "Unguarded laptop", "summary": "Decide whether to allow bypass mode", "evidence": []map[string]any{
		{"kind": "session", "id": w.unguardedSession}, {"kind": "install", "id": w.laptop}, {"kind": "run", "id": w.runs[0]},
		{"kind": "ledger_period", "id": time.Now().UTC().Format("2006-01")}, {"kind": "session", "id": w.unguardedSession},
	}}
	expect(t, do(t, s, "POST", rp, w.member.Token, body), 403, "member creates a packet")
	expect(t, do(t, s, "POST", rp, w.admin.Token, map[string]any{"title": "x", "evidence": []map[string]any{{"kind": "session", "id": "NOPE"}}}), 404, "unknown session")
	expect(t, do(t, s, "POST", rp, w.admin.Token, map[string]any{"title": "x", "evidence": []map[string]any{{"kind": "secret", "id": "a"}}}), 422, "unknown kind")
	expect(t, do(t, s, "POST", rp, w.admin.Token, map[string]any{"title": "x", "evidence": []map[string]any{{"kind": "ledger_period", "id": "last month"}}}), 422, "bad period")
	expect(t, do(t, s, "POST", rp, w.admin.Token, map[string]any{"evidence": []map[string]any{}}), 422, "no title")
	other := s.NewUser("packets-other@insights.example")
	expect(t, do(t, s, "POST", "/api/resources/"+other.Workspace+"/review-packets", other.Token,
		map[string]any{"title": "steal", "evidence": []map[string]any{{"kind": "session", "id": w.unguardedSession}}}), 404, "another workspace's session as evidence")
	made := dataOf(expect(t, do(t, s, "POST", rp, w.admin.Token, body), 201, "create packet"))
	pid := made["id"].(string)
	if made["status"] != "pending" || len(made["evidence"].([]any)) != 4 {
		t.Fatalf("created packet: %v", made)
	}
	if l := expect(t, do(t, s, "GET", "/api/review-packets", w.member.Token, nil, "X-Reeve-Workspace", ws), 200, "member lists through the twin"); len(l.JSON["data"].([]any)) != 2 {
		t.Fatalf("packets: %s", l.Body)
	}
	expect(t, do(t, s, "GET", "/api/review-packets/"+pid, w.member.Token, nil, "X-Reeve-Workspace", ws), 200, "member reads through the twin")
	expect(t, do(t, s, "GET", "/api/resources/"+other.Workspace+"/review-packets/"+pid, other.Token, nil), 404, "outsider reads")
	expect(t, do(t, s, "GET", rp+"/NOPE", w.member.Token, nil), 404, "unknown packet")

	// Decided once, by an owner or admin.
	expect(t, do(t, s, "PATCH", rp+"/"+pid+"/decision", w.member.Token, map[string]any{"decision": "approve"}), 403, "member decides")
	expect(t, do(t, s, "PATCH", rp+"/"+pid+"/decision", w.admin.Token, map[string]any{"decision": "maybe"}), 422, "bad decision")
	expect(t, do(t, s, "PATCH", rp+"/NOPE/decision", w.admin.Token, map[string]any{"decision": "approve"}), 404, "decide unknown")
	expect(t, do(t, s, "PATCH", "/api/resources/"+other.Workspace+"/review-packets/"+pid+"/decision", other.Token, map[string]any{"decision": "approve"}), 404, "outsider decides")
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := do(t, s, "PATCH", "/api/review-packets/"+converted+"/decision", w.owner.Token, map[string]any{"decision": []string{"approve", "reject"}[i%2], "reason": "race"}, "X-Reeve-Workspace", ws)
			mu.Lock()
			codes[a.Status]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if codes[200] != 1 || codes[409] != 9 {
		t.Fatalf("10 racing decisions: %v", codes)
	}
	dec := dataOf(expect(t, do(t, s, "PATCH", rp+"/"+pid+"/decision", w.admin.Token, map[string]any{"decision": "approve", "reason": "bypass only on the CI laptop"}), 200, "approve"))
	if dec["status"] != "approved" || dec["decided_by"] == nil || dec["decision_reason"] != "bypass only on the CI laptop" {
		t.Fatalf("decided: %v", dec)
	}
	if a := expect(t, do(t, s, "PATCH", rp+"/"+pid+"/decision", w.owner.Token, map[string]any{"decision": "reject"}), 409, "decide twice"); a.errCode() != sdk.CodeAlreadyDecided {
		t.Fatalf("decide twice: %s", a.Body)
	}
	audit := expect(t, do(t, s, "GET", "/api/workspaces/"+ws+"/audit?limit=1000", w.owner.Token, nil), 200, "audit")
	for _, want := range []string{"review_packet.create", "review_packet.decide", "insight.convert", "insight.update"} {
		if !strings.Contains(string(audit.Body), want) {
			t.Fatalf("audit lacks %s", want)
		}
	}

	// Export: signed, verifiable with the server's published key; one
	// changed byte fails.
	exp := expect(t, do(t, s, "GET", rp+"/"+pid+"/export", w.member.Token, nil), 200, "export")
	b, err := sdk.VerifyEvidence(exp.Body, jwksOf(t, s))
	if err != nil {
		t.Fatalf("export does not verify: %v", err)
	}
	if b.Kind != "review-packet" || b.ReviewPacketID != pid || b.WorkspaceID != ws || len(b.Events) != 4 || len(b.Decisions) != 1 || b.ChainHead == "" {
		t.Fatalf("bundle: %+v", b)
	}
	var first struct {
		Link   map[string]any `json:"link"`
		Record map[string]any `json:"record"`
	}
	if err := json.Unmarshal(b.Events[0].Payload, &first); err != nil || first.Link["id"] != w.unguardedSession || first.Record["id"] != w.unguardedSession {
		t.Fatalf("first evidence event: %s %v", b.Events[0].Payload, err)
	}
	tampered := strings.Replace(string(exp.Body), `"signature":"`, `"signature":"A`, 1)
	if _, err := sdk.VerifyEvidence([]byte(tampered), jwksOf(t, s)); err == nil {
		t.Fatal("a tampered export verifies")
	}
	expect(t, do(t, s, "GET", "/api/review-packets/"+pid+"/export", w.member.Token, nil, "X-Reeve-Workspace", ws), 200, "export through the twin")
}

// The server runs detection by itself at start (then hourly): a server
// restarted over a workspace with findings raises them without anyone
// asking, attributed to the system.
func TestInsightsDetectedByTheServer(t *testing.T) {
	w := newInsightWorld(t, servertest.Options{InsightInterval: -1})
	if l := expect(t, do(t, w.s, "GET", w.ri, w.owner.Token, nil), 200, "list"); len(l.JSON["data"].([]any)) != 0 {
		t.Fatalf("a server with detection off raised insights: %s", l.Body)
	}
	dir := w.s.DataDir
	w.s.Stop()
	s := servertest.Start(t, servertest.Options{DataDir: dir, InsightInterval: time.Hour})
	deadline := time.Now().Add(30 * time.Second)
	for {
		l := expect(t, do(t, s, "GET", w.ri, w.owner.Token, nil), 200, "list")
		if len(l.JSON["data"].([]any)) == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server raised %d insights by itself: %s", len(l.JSON["data"].([]any)), l.Body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	audit := expect(t, do(t, s, "GET", "/api/workspaces/"+w.owner.Workspace+"/audit?limit=1000", w.owner.Token, nil), 200, "audit")
	if !strings.Contains(string(audit.Body), `"system:insights"`) || !strings.Contains(string(audit.Body), `"schedule"`) {
		t.Fatal("the scheduled detection is not audited as the system's")
	}
}
