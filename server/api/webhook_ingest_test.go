package api_test

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
	"reeve.dev/reeve/server/store/storetest"
	"reeve.dev/reeve/server/webhooksig"
)

const routesYAML = `version: 1
routes:
  - name: triage
    on: {trigger: issue, labels: [reeve]}
    agent: claude
    prompt: "{{.Body}}"
  - name: review
    on: {trigger: pull_request}
    agent: codex
    prompt: "Review {{.URL}}"
`

func putRoutes(t *testing.T, s *servertest.Server, u servertest.User, yaml string) {
	t.Helper()
	sum := sha256.Sum256([]byte(yaml))
	body := sdk.TeamResourceBundle{Files: []sdk.TeamResourceFile{{Path: ".reeve/routes/work.yaml", SHA256: hex.EncodeToString(sum[:]), ContentBase64: base64.StdEncoding.EncodeToString([]byte(yaml))}}}
	expect(t, do(t, s, "PUT", "/api/workspaces/"+u.Workspace+"/team-resources/default", u.Token, body), 200, "put routes")
}

func inboundSource(t *testing.T, s *servertest.Server, u servertest.User, provider, secret string) map[string]any {
	t.Helper()
	a := expect(t, do(t, s, "POST", "/api/integration-webhooks", u.Token, map[string]any{"direction": "inbound", "provider": provider, "secret": secret}, "X-Reeve-Workspace", u.Workspace), 201, "create "+provider+" source")
	return dataOf(a)
}

func issueLabeled(number int, label, body string) []byte {
	b, _ := json.Marshal(map[string]any{
		"action": "labeled",
		"label":  map[string]any{"name": label},
		"issue": map[string]any{"number": number, "title": fmt.Sprintf("Issue %d", number), "body": body, "html_url": fmt.Sprintf("https://code.example/o/r/issues/%d", number),
			"labels": []any{map[string]any{"name": "bug"}, map[string]any{"name": label}}},
		"repository": map[string]any{"full_name": "o/r"},
	})
	return b
}

func postCodeHost(t *testing.T, s *servertest.Server, ws, secret, delivery, event string, body []byte) answer {
	t.Helper()
	return do(t, s, "POST", "/api/webhooks/code-host/events?workspace="+ws, "", body,
		"X-Hub-Signature-256", webhooksig.SignCodeHost([]byte(secret), body), "X-GitHub-Delivery", delivery, "X-GitHub-Event", event)
}

func eventCount(t *testing.T, s *servertest.Server, u servertest.User) int {
	t.Helper()
	a := expect(t, do(t, s, "GET", "/api/integration-events?limit=500", u.Token, nil, "X-Reeve-Workspace", u.Workspace), 200, "list events")
	list, _ := a.JSON["data"].([]any)
	return len(list)
}

// Inbound deliveries over real HTTP: verified per provider, forged, stale,
// oversized, malformed and replayed ones refused or deduplicated, and a
// labelled issue routed to the route that asks for the label.
func TestWebhookIngest(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testWebhookIngest(t, servertest.Options{}) })
	t.Run("postgres", func(t *testing.T) {
		storetest.Available(t)
		testWebhookIngest(t, servertest.Options{DatabaseURL: storetest.PostgresURL(t)})
	})
}

func testWebhookIngest(t *testing.T, o servertest.Options) {
	o.MaxBodyBytes, o.WebhookRate = 64<<10, 1000
	s := servertest.Start(t, o)
	owner := s.NewUser("owner@example.com")
	member := s.AddMember(owner.Workspace, "member@example.com", "member")
	other := s.NewUser("other@example.com")
	const secret = "code-host-secret-0123456789"

	// Only admins configure sources; a source per provider.
	expect(t, do(t, s, "POST", "/api/integration-webhooks", member.Token, map[string]any{"direction": "inbound", "provider": "code-host"}, "X-Reeve-Workspace", owner.Workspace), 403, "member creates a source")
	src := inboundSource(t, s, owner, "code-host", secret)
	if src["secret"] != secret || !strings.Contains(src["ingest_url"].(string), "/api/webhooks/code-host/events?workspace="+owner.Workspace) {
		t.Fatalf("source answer: %v", src)
	}
	expect(t, do(t, s, "POST", "/api/integration-webhooks", owner.Token, map[string]any{"direction": "inbound", "provider": "code-host"}, "X-Reeve-Workspace", owner.Workspace), 409, "second code-host source")
	list := expect(t, do(t, s, "GET", "/api/integration-webhooks", owner.Token, nil, "X-Reeve-Workspace", owner.Workspace), 200, "list")
	if strings.Contains(string(list.Body), secret) {
		t.Fatal("the secret is shown after creation")
	}
	otherSrc := inboundSource(t, s, other, "code-host", "other-workspace-secret-0000")
	_ = otherSrc
	putRoutes(t, s, owner, routesYAML)
	// No executor offers claude yet: the match records why no run exists.
	a0 := expect(t, postCodeHost(t, s, owner.Workspace, secret, "d-0", "issues", issueLabeled(6, "reeve", "too early")), 201, "delivery without an executor")
	ev0 := dataOf(expect(t, do(t, s, "GET", "/api/integration-events/"+dataOf(a0)["event_id"].(string), owner.Token, nil, "X-Reeve-Workspace", owner.Workspace), 200, "get event"))
	m0 := ev0["routing"].(map[string]any)["matched"].([]any)[0].(map[string]any)
	if m0["status"] != "failed" || !strings.Contains(m0["error"].(string), "executor") {
		t.Fatalf("a run without an executor: %v", m0)
	}
	expect(t, do(t, s, "POST", "/api/managed-executors", owner.Token, map[string]any{"name": "ci", "agents": []string{"claude", "gemini", "shell", "codex"}}, "X-Reeve-Workspace", owner.Workspace), 201, "executor")

	body := issueLabeled(7, "reeve", "Fix the flaky login test")
	a := expect(t, postCodeHost(t, s, owner.Workspace, secret, "d-1", "issues", body), 201, "signed delivery")
	evID := dataOf(a)["event_id"].(string)
	if dataOf(a)["matched"] != float64(1) {
		t.Fatalf("matched: %s", a.Body)
	}
	ev := dataOf(expect(t, do(t, s, "GET", "/api/integration-events/"+evID, owner.Token, nil, "X-Reeve-Workspace", owner.Workspace), 200, "get event"))
	routing := ev["routing"].(map[string]any)
	m := routing["matched"].([]any)[0].(map[string]any)
	if ev["kind"] != "issues" || m["route"] != "triage" || m["agent"] != "claude" || m["prompt"] != "Fix the flaky login test" || m["file"] != ".reeve/routes/work.yaml" {
		t.Fatalf("routing: %v", routing)
	}
	if ev["verification"].(map[string]any)["result"] != "verified" {
		t.Fatalf("verification: %v", ev["verification"])
	}
	// The labelled issue queued a run of claude with the issue body as prompt.
	runID, _ := m["workflow_run_id"].(string)
	if runID == "" || m["status"] != "queued" {
		t.Fatalf("no run queued: %v", m)
	}
	run := dataOf(expect(t, do(t, s, "GET", "/api/workflow-runs/"+runID, owner.Token, nil, "X-Reeve-Workspace", owner.Workspace), 200, "get run"))
	if run["agent"] != "claude" || run["prompt"] != "Fix the flaky login test" || run["status"] != "queued" || run["repo"] != "o/r" {
		t.Fatalf("queued run: %v", run)
	}
	expectWebhookActor(t, s, owner, evID, runID, "d-1")

	// A label the route does not ask for starts nothing.
	a = expect(t, postCodeHost(t, s, owner.Workspace, secret, "d-2", "issues", issueLabeled(8, "docs", "x")), 201, "other label")
	if dataOf(a)["matched"] != float64(0) {
		t.Fatalf("an unrelated label matched: %s", a.Body)
	}

	n := eventCount(t, s, owner)
	// Replay: 200, nothing new.
	a = expect(t, postCodeHost(t, s, owner.Workspace, secret, "d-1", "issues", body), 200, "replay")
	if dataOf(a)["duplicate"] != true || dataOf(a)["event_id"] != evID {
		t.Fatalf("replay answer %s", a.Body)
	}
	// Forged: wrong secret, the other workspace's secret, tampered body,
	// missing signature, unknown workspace.
	expect(t, postCodeHost(t, s, owner.Workspace, "guessed-secret-000000000", "d-3", "issues", body), 401, "forged")
	expect(t, postCodeHost(t, s, owner.Workspace, "other-workspace-secret-0000", "d-3", "issues", body), 401, "another workspace's secret")
	tampered := do(t, s, "POST", "/api/webhooks/code-host/events?workspace="+owner.Workspace, "", issueLabeled(7, "reeve", "rm -rf /"),
		"X-Hub-Signature-256", webhooksig.SignCodeHost([]byte(secret), body), "X-GitHub-Delivery", "d-4", "X-GitHub-Event", "issues")
	expect(t, tampered, 401, "tampered body")
	expect(t, do(t, s, "POST", "/api/webhooks/code-host/events?workspace="+owner.Workspace, "", body, "X-GitHub-Delivery", "d-5", "X-GitHub-Event", "issues"), 401, "unsigned")
	expect(t, postCodeHost(t, s, "01ARZ3NDEKTSV4RRFFQ69G5FAV", secret, "d-6", "issues", body), 401, "unknown workspace")
	expect(t, postCodeHost(t, s, "", secret, "d-6", "issues", body), 401, "no workspace")
	// What a provider holds is no credential elsewhere: neither the secret
	// nor a valid signature opens a user route.
	for _, tok := range []string{secret, webhooksig.SignCodeHost([]byte(secret), body)} {
		expect(t, do(t, s, "GET", "/api/workflow-runs", tok, nil, "X-Reeve-Workspace", owner.Workspace), 401, "a webhook secret as a bearer")
		expect(t, do(t, s, "GET", "/api/workspaces/"+owner.Workspace+"/audit", tok, nil), 401, "a webhook signature as a bearer")
	}
	// Valid signature, not JSON: 422, nothing stored.
	expect(t, postCodeHost(t, s, owner.Workspace, secret, "d-7", "issues", []byte(`{"action": "labeled",`)), 422, "malformed JSON")
	expect(t, postCodeHost(t, s, owner.Workspace, secret, "", "issues", body), 422, "no delivery id")
	// Over the size limit: 413 before any verification.
	big := []byte(`{"pad":"` + strings.Repeat("a", 70<<10) + `"}`)
	expect(t, postCodeHost(t, s, owner.Workspace, secret, "d-8", "issues", big), 413, "oversized")
	if got := eventCount(t, s, owner); got != n {
		t.Fatalf("refused deliveries stored events: %d, want %d", got, n)
	}

	// 60 concurrent copies of one new delivery: one event, one 201.
	body9 := issueLabeled(9, "reeve", "race")
	var wg sync.WaitGroup
	codes := make(chan int, 60)
	for i := 0; i < 60; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- postCodeHost(t, s, owner.Workspace, secret, "d-9", "issues", body9).Status
		}()
	}
	wg.Wait()
	close(codes)
	created := 0
	for c := range codes {
		switch c {
		case 201:
			created++
		case 200:
		default:
			t.Fatalf("concurrent replay answered %d", c)
		}
	}
	if created != 1 || eventCount(t, s, owner) != n+1 {
		t.Fatalf("concurrent copies: %d created, %d events (want 1, %d)", created, eventCount(t, s, owner), n+1)
	}

	// Chat: timestamped, 5-minute tolerance; the URL check is answered.
	const chatSecret = "chat-signing-secret-000000"
	inboundSource(t, s, owner, "chat", chatSecret)
	postChat := func(at time.Time, b []byte) answer {
		ts, sig := webhooksig.SignChat([]byte(chatSecret), at, b)
		return do(t, s, "POST", "/api/webhooks/chat/events?workspace="+owner.Workspace, "", b, "X-Slack-Request-Timestamp", ts, "X-Slack-Signature", sig)
	}
	msg := []byte(`{"type":"event_callback","event_id":"Ev1","event":{"type":"message","text":"deploy please","channel":"C1"}}`)
	expect(t, postChat(time.Now().Add(-6*time.Minute), msg), 401, "stale chat")
	expect(t, postChat(time.Now().Add(6*time.Minute), msg), 401, "future chat")
	a = expect(t, postChat(time.Now(), msg), 201, "chat message")
	if dataOf(a)["kind"] != "message" {
		t.Fatalf("chat kind: %s", a.Body)
	}
	a = expect(t, postChat(time.Now(), []byte(`{"type":"url_verification","challenge":"abc123"}`)), 200, "chat url verification")
	if dataOf(a)["challenge"] != "abc123" {
		t.Fatalf("challenge: %s", a.Body)
	}

	// Tracker: body HMAC, timestamp in the body.
	const trackerSecret = "tracker-secret-0000000000"
	inboundSource(t, s, owner, "tracker", trackerSecret)
	postTracker := func(delivery string, b []byte) answer {
		return do(t, s, "POST", "/api/webhooks/tracker/events?workspace="+owner.Workspace, "", b, "Linear-Signature", webhooksig.SignTracker([]byte(trackerSecret), b), "Linear-Delivery", delivery)
	}
	tb := func(at time.Time) []byte {
		return []byte(`{"type":"Issue","action":"update","webhookTimestamp":` + strconv.FormatInt(at.UnixMilli(), 10) + `,"data":{"title":"T","description":"D","labels":[{"name":"reeve"}]},"url":"https://tracker.example/i/1"}`)
	}
	expect(t, postTracker("t-0", tb(time.Now().Add(-10*time.Minute))), 401, "stale tracker")
	a = expect(t, postTracker("t-1", tb(time.Now())), 201, "tracker issue update")
	if dataOf(a)["kind"] != "issue.updated" || dataOf(a)["matched"] != float64(1) {
		t.Fatalf("tracker: %s", a.Body)
	}

	// Payments (thin events): t=,v1= with several v1 while rolling.
	paySrc := inboundSource(t, s, owner, "payments-thin", "whsec_payments_thin_secret_00")
	_ = paySrc
	pb := []byte(`{"id":"evt_1","object":"v2.core.event","type":"v1.billing.meter.error_report_triggered"}`)
	sig := webhooksig.SignPayments(time.Now(), pb, []byte("whsec_old_secret"), []byte("whsec_payments_thin_secret_00"))
	expect(t, do(t, s, "POST", "/api/webhooks/payments-thin/events?workspace="+owner.Workspace, "", pb, "Stripe-Signature", sig), 201, "payments thin")
	stale := webhooksig.SignPayments(time.Now().Add(-time.Hour), pb, []byte("whsec_payments_thin_secret_00"))
	expect(t, do(t, s, "POST", "/api/webhooks/payments-thin/events?workspace="+owner.Workspace, "", pb, "Stripe-Signature", stale), 401, "stale payments")

	// Rotation: the previous secret verifies during the grace period.
	rot := expect(t, do(t, s, "POST", "/api/integration-webhooks/"+src["id"].(string)+"/rotate-secret", owner.Token, map[string]any{"secret": "rotated-code-host-secret-1"}, "X-Reeve-Workspace", owner.Workspace), 200, "rotate")
	if dataOf(rot)["secret"] != "rotated-code-host-secret-1" || dataOf(rot)["previous_secret_expires_at"] == nil {
		t.Fatalf("rotate: %s", rot.Body)
	}
	expect(t, postCodeHost(t, s, owner.Workspace, secret, "d-10", "issues", issueLabeled(10, "x", "y")), 201, "previous secret in grace")
	expect(t, postCodeHost(t, s, owner.Workspace, "rotated-code-host-secret-1", "d-11", "issues", issueLabeled(11, "x", "y")), 201, "new secret")
	expect(t, do(t, s, "POST", "/api/integration-webhooks/"+src["id"].(string)+"/rotate-secret", owner.Token, map[string]any{"secret": "rotated-code-host-secret-2", "grace_seconds": 0}, "X-Reeve-Workspace", owner.Workspace), 200, "rotate without grace")
	expect(t, postCodeHost(t, s, owner.Workspace, "rotated-code-host-secret-1", "d-12", "issues", issueLabeled(12, "x", "y")), 401, "retired secret")

	// Another workspace cannot read this one's events.
	expect(t, do(t, s, "GET", "/api/integration-events/"+evID, other.Token, nil, "X-Reeve-Workspace", owner.Workspace), 403, "other workspace reads an event")
	expect(t, do(t, s, "GET", "/api/integration-events/"+evID, other.Token, nil), 404, "other workspace's own scope")

	// retry-routing against changed routes; the audit packet verifies.
	putRoutes(t, s, owner, strings.Replace(routesYAML, "agent: claude", "agent: gemini", 1)+`  - name: second
    on: {trigger: issue, labels: [reeve]}
    agent: shell
    prompt: "echo {{.Title}}"
`)
	rr := dataOf(expect(t, do(t, s, "POST", "/api/integration-events/"+evID+"/retry-routing", owner.Token, map[string]any{}, "X-Reeve-Workspace", owner.Workspace), 200, "retry routing"))
	routing = rr["routing"].(map[string]any)
	if routing["attempt"] != float64(2) || len(routing["matched"].([]any)) != 2 || len(routing["history"].([]any)) != 1 {
		t.Fatalf("retry routing: %v", routing)
	}
	// The route that already queued its run is not run twice; the new one
	// queues its own.
	rm := routing["matched"].([]any)
	if rm[0].(map[string]any)["workflow_run_id"] != runID || rm[1].(map[string]any)["agent"] != "shell" || rm[1].(map[string]any)["workflow_run_id"] == runID {
		t.Fatalf("retry routing matches: %v", rm)
	}
	// An event recorded by hand is routed like a delivery; its key is
	// taken like a delivery's.
	manual := map[string]any{"provider": "tracker", "kind": "issue.created", "delivery_id": "manual-1",
		"subject": map[string]any{"title": "Manual", "body": "by hand", "labels": []string{"reeve"}}}
	expect(t, do(t, s, "POST", "/api/integration-events", member.Token, manual, "X-Reeve-Workspace", owner.Workspace), 403, "member records an event")
	me := dataOf(expect(t, do(t, s, "POST", "/api/integration-events", owner.Token, manual, "X-Reeve-Workspace", owner.Workspace), 201, "record an event"))
	if mm := me["routing"].(map[string]any)["matched"].([]any); len(mm) != 2 || me["verification"].(map[string]any)["scheme"] != "api" {
		t.Fatalf("manual event: %v", me)
	}
	expect(t, do(t, s, "POST", "/api/integration-events", owner.Token, manual, "X-Reeve-Workspace", owner.Workspace), 409, "the same delivery id again")
	manual["verification"] = map[string]any{"result": "verified"}
	expect(t, do(t, s, "POST", "/api/integration-events", owner.Token, manual, "X-Reeve-Workspace", owner.Workspace), 422, "a forged verification field")

	pk := expect(t, do(t, s, "GET", "/api/integration-events/"+evID+"/audit-packet", owner.Token, nil, "X-Reeve-Workspace", owner.Workspace), 200, "audit packet")
	payload := verifyPacket(t, s, pk.Body)
	if !strings.Contains(string(payload), `"delivery_id":"d-1"`) || !strings.Contains(string(payload), "work.yaml#second") || !strings.Contains(string(payload), `"result":"verified"`) {
		t.Fatalf("audit packet payload: %s", payload)
	}
}

// expectWebhookActor checks that what a verified code-host delivery caused
// (its event, the routing, the run its route queued and the run's history)
// names the provider's webhook and the delivery, and that nothing in the
// workspace's audit log was done by nobody.
func expectWebhookActor(t *testing.T, s *servertest.Server, u servertest.User, eventID, runID, delivery string) {
	t.Helper()
	const actor = "webhook:code-host"
	run := dataOf(expect(t, do(t, s, "GET", "/api/workflow-runs/"+runID, u.Token, nil, "X-Reeve-Workspace", u.Workspace), 200, "get run"))
	if run["created_by"] != actor {
		t.Errorf("run created_by = %v, want %s", run["created_by"], actor)
	}
	evs := expect(t, do(t, s, "POST", "/api/workflow-runs/"+runID+"/events", u.Token, `{}`, "X-Reeve-Workspace", u.Workspace), 200, "run events")
	list, _ := evs.JSON["data"].([]any)
	if len(list) == 0 || list[0].(map[string]any)["kind"] != sdk.RunEventCreated || list[0].(map[string]any)["actor"] != actor {
		t.Errorf("the run's created event does not name %s: %s", actor, evs.Body)
	}
	au := expect(t, do(t, s, "GET", "/api/workspaces/"+u.Workspace+"/audit?limit=1000", u.Token, nil), 200, "audit")
	entries, _ := au.JSON["data"].([]any)
	want := map[string]string{"integration_event.received": eventID, "integration_event.route": eventID, "workflow_run.create": "workflow-runs/" + runID}
	for _, it := range entries {
		e := it.(map[string]any)
		if e["actor"] == "anonymous" || e["actor"] == "" {
			t.Errorf("an audit entry names no actor: %v", e)
		}
		target, ok := want[e["action"].(string)]
		if !ok || e["target"] != target {
			continue
		}
		detail, _ := e["detail"].(map[string]any)
		if e["actor"] != actor || detail["delivery_id"] != delivery {
			t.Errorf("audit %s: actor %v, delivery %v; want %s, %s", e["action"], e["actor"], detail["delivery_id"], actor, delivery)
		}
		delete(want, e["action"].(string))
	}
	if len(want) > 0 {
		t.Errorf("audit entries missing: %v in %s", want, au.Body)
	}
}

func verifyPacket(t *testing.T, s *servertest.Server, body []byte) []byte {
	t.Helper()
	var env sdk.EvidenceEnvelope
	if err := json.Unmarshal(body, &env); err != nil {
		t.Fatal(err)
	}
	jw := do(t, s, "GET", "/api/.well-known/jwks.json", "", nil)
	var keys sdk.JWKS
	if err := json.Unmarshal(jw.Body, &keys); err != nil {
		t.Fatal(err)
	}
	payload, _ := base64.RawURLEncoding.DecodeString(env.Data.Payload)
	sig, _ := base64.RawURLEncoding.DecodeString(env.Data.Signature)
	for _, k := range keys.Keys {
		if k.Kid == env.Data.KeyID {
			pub, err := k.PublicKey()
			if err != nil {
				t.Fatal(err)
			}
			if !ed25519.Verify(pub, payload, sig) {
				t.Fatal("the audit packet's signature does not verify")
			}
			tampered := append([]byte{}, payload...)
			tampered[len(tampered)/2] ^= 1
			if ed25519.Verify(pub, tampered, sig) {
				t.Fatal("a tampered packet verifies")
			}
			return payload
		}
	}
	t.Fatalf("key %s not published", env.Data.KeyID)
	return nil
}

// Each source of each workspace is throttled: 429 with Retry-After, and
// other sources or workspaces are not held back by it.
func TestWebhookThrottle(t *testing.T) {
	s := servertest.Start(t, servertest.Options{WebhookRate: 10})
	u := s.NewUser("owner@example.com")
	inboundSource(t, s, u, "code-host", "code-host-secret-0123456789")
	var wg sync.WaitGroup
	var mu sync.Mutex
	limited, other := 0, 0
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			a := postCodeHost(t, s, u.Workspace, "forged-secret-000000000000", "d", "issues", []byte(`{}`))
			mu.Lock()
			defer mu.Unlock()
			switch a.Status {
			case http.StatusTooManyRequests:
				limited++
				if ra, err := strconv.Atoi(a.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 61 {
					t.Errorf("Retry-After %q", a.Header.Get("Retry-After"))
				}
			case http.StatusUnauthorized:
				other++
			default:
				t.Errorf("status %d", a.Status)
			}
		}(i)
	}
	wg.Wait()
	// At most two windows' worth pass (the minute may turn during the test).
	if limited < 30 || other > 20 {
		t.Fatalf("%d throttled, %d passed to verification", limited, other)
	}
	// The chat source of the same workspace has its own budget.
	a := do(t, s, "POST", "/api/webhooks/chat/events?workspace="+u.Workspace, "", `{}`)
	if a.Status != http.StatusUnauthorized {
		t.Fatalf("chat source held back by the code-host throttle: %d", a.Status)
	}
}
