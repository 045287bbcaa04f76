package api_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/servertest"
)

func TestSessionViewsFromSyncedEvents(t *testing.T) {
	s := servertest.Start(t, servertest.Options{})
	u := s.NewUser("v@example.com")
	ctx := context.Background()
	in, err := u.Client.CreateInstall(ctx, u.Workspace, "m")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	ev := func(seq int64, kind, data string) sdk.SyncEvent {
		return sdk.SyncEvent{Seq: seq, Kind: kind, TS: now, Data: json.RawMessage(data)}
	}
	res, err := s.Client(in.IssueToken).SyncSession(ctx, sdk.SyncRequest{
		Session:    sdk.SyncSession{ID: "01ARZ3NDEKTSV4RRFFQ69G5FAV", Agent: "claude", Model: "sonnet", Status: "completed", CreatedAt: now, UpdatedAt: now, PolicyHash: "sha256:abc", Mode: "detect", Guarded: true},
		UploadMode: sdk.UploadFull,
		Events: []sdk.SyncEvent{
			ev(1, "permission-request", `{"id":"r1","tool":"Bash","input":{"command":"rm -rf build"}}`),
			ev(2, "permission-decision", `{"request_id":"r1","tool":"Bash","decision":"deny","decided_by":"policy:no-rm","reason":"policy"}`),
			ev(3, "tool-call", `{"id":"t1","name":"mcp__github__create_issue"}`),
			ev(4, "permission-decision", `{"request_id":"r2","tool":"Edit","decision":"allow","decided_by":"human"}`),
			ev(5, "usage", `{"model":"sonnet","input_tokens":100,"output_tokens":20,"cost_usd":0.5}`),
			ev(6, "usage", `{"model":"sonnet","input_tokens":50,"output_tokens":10,"cost_usd":0.25}`),
			ev(7, "mode", `{"mode":"bypass"}`),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	base := "/api/resources/" + u.Workspace + "/sessions/" + res.SessionID
	get := func(view string) map[string]any {
		return dataOf(expect(t, do(t, s, "GET", base+"/"+view, u.Token, nil), 200, view))
	}
	aa := get("approval-audit")
	if aa["count"] != float64(2) || !strings.Contains(toJSON(aa), `"command":"rm -rf build"`) || !strings.Contains(toJSON(aa), `"decided_by":"policy:no-rm"`) {
		t.Fatalf("approval audit %v", aa)
	}
	if ge := get("guardrail-evidence"); ge["count"] != float64(1) {
		t.Fatalf("guardrail evidence %v", ge)
	}
	if g := get("governance"); g["effective_policy_hash"] != "sha256:abc" || g["mode"] != "bypass" || g["guarded"] != true {
		t.Fatalf("governance %v", g)
	}
	sp := get("spend")
	if tot := sp["total"].(map[string]any); tot["input_tokens"] != float64(150) || tot["cost_usd"] != 0.75 || len(sp["turns"].([]any)) != 2 {
		t.Fatalf("spend %v", sp)
	}
	if m := get("mcp-tools"); !strings.Contains(toJSON(m), `"server":"github"`) {
		t.Fatalf("mcp tools %v", m)
	}
	if r := get("readiness"); r["ready"] != true || r["status"] != "completed" {
		t.Fatalf("readiness %v", r)
	}
	if a := get("adapter-receipts"); a["agent"] != "claude" || a["events"] != float64(7) {
		t.Fatalf("adapter receipts %v", a)
	}
}

func toJSON(v any) string { b, _ := json.Marshal(v); return string(b) }
