package api

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// Views of a run computed from its history: story, telemetry, trace feed,
// audit packet and gates. Nothing here is stored; each answer is derived
// from the run, its approval nodes and its events as they are now.

// maxViewEvents bounds how much history a view reads.
const maxViewEvents = 20000

type runHistory struct {
	run       store.WorkflowRun
	approvals []store.RunApproval
	events    []store.RunEvent
	truncated bool
}

func (c *call) history() (runHistory, error) {
	r, aps, err := c.loadRun()
	if err != nil {
		return runHistory{}, err
	}
	wf, _ := c.wfStore()
	h := runHistory{run: r, approvals: aps}
	var after int64
	for len(h.events) < maxViewEvents {
		page, err := wf.RunEvents(c.ctx(), r.ID, after, 1000)
		if err != nil {
			return h, err
		}
		h.events = append(h.events, page...)
		if len(page) < 1000 {
			return h, nil
		}
		after = page[len(page)-1].Seq
	}
	h.truncated = true
	return h, nil
}

func evData(e store.RunEvent) map[string]any {
	m := map[string]any{}
	_ = json.Unmarshal(e.Data, &m)
	return m
}

// storyLine turns one event into a sentence (empty: not part of the story).
func storyLine(e store.RunEvent) string {
	d := evData(e)
	switch e.Kind {
	case sdk.RunEventCreated:
		s := fmt.Sprintf("created as %v to run %v", d["status"], d["agent"])
		if d["rerun_of"] != nil && d["rerun_of"] != "" {
			s += fmt.Sprintf(" (a rerun of %v)", d["rerun_of"])
		}
		return s
	case sdk.RunEventStatus:
		s := fmt.Sprintf("became %v", d["status"])
		if r, ok := d["reason"].(string); ok && r != "" {
			s += " (" + r + ")"
		}
		return s
	case sdk.RunEventLeased:
		return fmt.Sprintf("leased to executor %v: attempt %v, fence %v", d["executor_id"], d["attempt"], d["fence"])
	case sdk.RunEventLeaseExpired:
		return fmt.Sprintf("lease %v expired without a heartbeat (attempt %v)", d["lease_id"], d["attempt"])
	case sdk.RunEventLeaseReleased:
		return fmt.Sprintf("lease %v given back: %v", d["lease_id"], d["reason"])
	case sdk.RunEventCancelRequested:
		return fmt.Sprintf("cancel requested; executor %v is told on its next heartbeat", d["executor_id"])
	case sdk.RunEventApprovalRequest:
		return fmt.Sprintf("asked a human to approve %v: %v", d["tool"], d["summary"])
	case sdk.RunEventApprovalDecision:
		return fmt.Sprintf("approval %v decided: %v", d["node_key"], d["decision"])
	case sdk.RunEventCompleted:
		s := fmt.Sprintf("finished %v", d["status"])
		if d["exit_code"] != nil {
			s += fmt.Sprintf(" with exit code %v", d["exit_code"])
		}
		if e, ok := d["error"].(string); ok && e != "" {
			s += ": " + e
		}
		return s
	}
	return ""
}

func (s *Server) runStory(c *call) (int, any, error) {
	h, err := c.history()
	if err != nil {
		return 0, nil, err
	}
	type line struct {
		Seq   int64     `json:"seq"`
		At    time.Time `json:"at"`
		Actor string    `json:"actor"`
		Kind  string    `json:"kind"`
		Text  string    `json:"text"`
	}
	lines := []line{}
	evidence := map[string]int{}
	for _, e := range h.events {
		if t := storyLine(e); t != "" {
			lines = append(lines, line{Seq: e.Seq, At: e.CreatedAt, Actor: e.Actor, Kind: e.Kind, Text: t})
		} else {
			evidence[e.Kind]++
		}
	}
	return 200, map[string]any{"data": map[string]any{"run_id": h.run.ID, "status": h.run.Status, "story": lines, "worker_evidence": evidence, "truncated": h.truncated}}, nil
}

func msBetween(a, b time.Time) int64 { return b.Sub(a).Milliseconds() }

func (s *Server) runTelemetry(c *call) (int, any, error) {
	h, err := c.history()
	if err != nil {
		return 0, nil, err
	}
	byKind := map[string]int{}
	var firstLease, lastLease *time.Time
	expiries, releases := 0, 0
	for _, e := range h.events {
		byKind[e.Kind]++
		switch e.Kind {
		case sdk.RunEventLeased:
			t := e.CreatedAt
			if firstLease == nil {
				firstLease = &t
			}
			lastLease = &t
		case sdk.RunEventLeaseExpired:
			expiries++
		case sdk.RunEventLeaseReleased:
			releases++
		}
	}
	r := h.run
	out := map[string]any{"run_id": r.ID, "status": r.Status, "attempts": r.Attempt, "max_attempts": r.MaxAttempts, "fence": r.Fence,
		"lease_expiries": expiries, "lease_releases": releases, "events": len(h.events), "events_by_kind": byKind}
	if firstLease != nil {
		out["queue_wait_ms"] = msBetween(r.CreatedAt, *firstLease)
	}
	if r.FinishedAt != nil {
		out["total_ms"] = msBetween(r.CreatedAt, *r.FinishedAt)
		if lastLease != nil {
			out["last_attempt_ms"] = msBetween(*lastLease, *r.FinishedAt)
		}
	}
	ap := map[string]int{}
	var waited int64
	for _, a := range h.approvals {
		st := approvalOut(a, c.now()).State
		ap[st]++
		if a.DecidedAt != nil {
			waited += msBetween(a.RequestedAt, *a.DecidedAt)
		}
	}
	out["approvals"] = ap
	out["approval_wait_ms"] = waited
	var oc runOutcome
	_ = json.Unmarshal(r.Outcome, &oc)
	if oc.Usage != nil {
		out["usage"] = oc.Usage
	}
	return 200, map[string]any{"data": out}, nil
}

// span is one interval of a run's trace: the run, each attempt (a lease)
// and each approval wait.
type span struct {
	SpanID   string         `json:"span_id"`
	ParentID string         `json:"parent_id,omitempty"`
	Name     string         `json:"name"`
	Start    time.Time      `json:"start"`
	End      *time.Time     `json:"end,omitempty"`
	Status   string         `json:"status"`
	Attrs    map[string]any `json:"attributes,omitempty"`
}

func traceOf(h runHistory, now time.Time) []span {
	r := h.run
	root := span{SpanID: r.ID, Name: "workflow_run", Start: r.CreatedAt, End: r.FinishedAt, Status: r.Status,
		Attrs: map[string]any{"agent": r.Agent, "attempts": r.Attempt}}
	spans := []span{root}
	var open *span
	closeOpen := func(at time.Time, status string) {
		if open != nil {
			t := at
			open.End, open.Status = &t, status
			spans = append(spans, *open)
			open = nil
		}
	}
	for _, e := range h.events {
		d := evData(e)
		switch e.Kind {
		case sdk.RunEventLeased:
			closeOpen(e.CreatedAt, "superseded")
			id, _ := d["lease_id"].(string)
			open = &span{SpanID: id, ParentID: r.ID, Name: "attempt", Start: e.CreatedAt, Status: "open",
				Attrs: map[string]any{"executor_id": d["executor_id"], "attempt": d["attempt"], "fence": d["fence"]}}
		case sdk.RunEventLeaseExpired:
			closeOpen(e.CreatedAt, "lease_expired")
		case sdk.RunEventLeaseReleased:
			closeOpen(e.CreatedAt, "released")
		case sdk.RunEventCompleted:
			st, _ := d["status"].(string)
			closeOpen(e.CreatedAt, st)
		}
	}
	if open != nil {
		spans = append(spans, *open)
	}
	for _, a := range h.approvals {
		parent := leaseIDOf(a.RunID, a.Fence)
		spans = append(spans, span{SpanID: a.RunID + "/" + a.NodeKey, ParentID: parent, Name: "approval", Start: a.RequestedAt, End: a.DecidedAt,
			Status: approvalOut(a, now).State, Attrs: map[string]any{"tool": a.Tool, "decided_by": a.DecidedBy}})
	}
	sort.SliceStable(spans, func(i, j int) bool { return spans[i].Start.Before(spans[j].Start) })
	return spans
}

func (s *Server) runTraceFeed(export bool) handlerFunc {
	return func(c *call) (int, any, error) {
		h, err := c.history()
		if err != nil {
			return 0, nil, err
		}
		data := map[string]any{"run_id": h.run.ID, "format": "reeve-trace-v1", "spans": traceOf(h, c.now())}
		if export {
			evs := make([]sdk.WorkflowRunEvent, 0, len(h.events))
			for _, e := range h.events {
				evs = append(evs, eventOut(e))
			}
			data["events"] = evs
			c.w.Header().Set("Content-Disposition", `attachment; filename="trace-`+h.run.ID+`.json"`)
		}
		return 200, map[string]any{"data": data}, nil
	}
}

// runAuditPacket is the run's record, approvals and events with a hash
// chain over the events, signed with the server's evidence key when it
// has one (verify with the keys at /api/.well-known/jwks.json).
func (s *Server) runAuditPacket(c *call) (int, any, error) {
	h, err := c.history()
	if err != nil {
		return 0, nil, err
	}
	now := c.now()
	type link struct {
		Seq    int64  `json:"seq"`
		Kind   string `json:"kind"`
		Digest string `json:"digest"`
	}
	chain := make([]link, 0, len(h.events))
	prev := ""
	evs := make([]sdk.WorkflowRunEvent, 0, len(h.events))
	for _, e := range h.events {
		out := eventOut(e)
		b, _ := json.Marshal(out)
		sum := sha256.Sum256(append([]byte(prev), b...))
		prev = hex.EncodeToString(sum[:])
		chain = append(chain, link{Seq: e.Seq, Kind: e.Kind, Digest: prev})
		evs = append(evs, out)
	}
	aps := make([]sdk.WorkflowApproval, 0, len(h.approvals))
	for _, a := range h.approvals {
		aps = append(aps, approvalOut(a, now))
	}
	packet := map[string]any{"kind": "workflow-run-audit", "workspace_id": c.ws.ID, "generated_at": now, "run": runOut(h.run, h.approvals, now),
		"approvals": aps, "events": evs, "chain": chain, "chain_head": prev, "truncated": h.truncated}
	c.w.Header().Set("Content-Disposition", `attachment; filename="audit-`+h.run.ID+`.json"`)
	if s.opts.Evidence == nil {
		return 200, map[string]any{"data": packet, "signed": false}, nil
	}
	payload, err := json.Marshal(packet)
	if err != nil {
		return 0, nil, err
	}
	signed, err := s.opts.Evidence.Sign(c.ctx(), payload)
	if err != nil {
		return 0, nil, fmt.Errorf("sign audit packet: %w", err)
	}
	return 200, sdk.EvidenceEnvelope{Data: signed}, nil
}

// runGates says which of the run's gates passed, failed or are pending.
func (s *Server) runGates(c *call) (int, any, error) {
	h, err := c.history()
	if err != nil {
		return 0, nil, err
	}
	r, now := h.run, c.now()
	type gate struct {
		Gate   string `json:"gate"`
		State  string `json:"state"` // passed, failed, pending
		Detail string `json:"detail"`
	}
	var oc runOutcome
	_ = json.Unmarshal(r.Outcome, &oc)
	gates := []gate{{Gate: "definition", State: "passed", Detail: "the run passed preflight when it was created"}}
	switch {
	case r.Status == sdk.RunBlocked:
		gates = append(gates, gate{"budget", "failed", budgetMessage(r.BlockedReason)})
	default:
		gates = append(gates, gate{"budget", "passed", "the budget admitted the run"})
	}
	ap := gate{Gate: "approvals", State: "passed", Detail: "no tool use needed a human"}
	for _, a := range h.approvals {
		switch approvalOut(a, now).State {
		case sdk.ApprovalPending:
			if ap.State == "passed" {
				ap = gate{"approvals", "pending", "approval " + a.NodeKey + " waits for a decision"}
			}
		case sdk.ApprovalDenied, sdk.ApprovalExpired:
			ap = gate{"approvals", "failed", "approval " + a.NodeKey + " was not granted"}
		}
		if ap.State == "passed" {
			ap.Detail = fmt.Sprintf("%d approval(s) granted", len(h.approvals))
		}
	}
	gates = append(gates, ap)
	switch {
	case r.Status == sdk.RunFailed && oc.ExitCode == nil:
		gates = append(gates, gate{"lease", "failed", firstNonEmpty(oc.Error, "the run failed before reporting")})
	default:
		gates = append(gates, gate{"lease", map[bool]string{true: "passed", false: "pending"}[sdk.RunTerminal(r.Status)], fmt.Sprintf("%d of %d attempts used", r.Attempt, r.MaxAttempts)})
	}
	switch {
	case oc.ExitCode == nil:
		st := "pending"
		if sdk.RunTerminal(r.Status) {
			st = "failed"
		}
		gates = append(gates, gate{"exit_status", st, "no exit status reported"})
	case *oc.ExitCode == 0:
		gates = append(gates, gate{"exit_status", "passed", "exit code 0"})
	default:
		gates = append(gates, gate{"exit_status", "failed", fmt.Sprintf("exit code %d", *oc.ExitCode)})
	}
	switch r.Status {
	case sdk.RunSucceeded:
		gates = append(gates, gate{"outcome", "passed", "succeeded"})
	case sdk.RunFailed, sdk.RunCancelled:
		gates = append(gates, gate{"outcome", "failed", r.Status})
	default:
		gates = append(gates, gate{"outcome", "pending", r.Status})
	}
	overall := "passed"
	for _, g := range gates {
		if g.State == "failed" {
			overall = "failed"
			break
		}
		if g.State == "pending" {
			overall = "pending"
		}
	}
	return 200, map[string]any{"data": map[string]any{"run_id": r.ID, "status": r.Status, "overall": overall, "gates": gates}}, nil
}

// withRun guards the workflow-run placeholder routes this file does not
// serve (replay, contract health, ...): 404 unless the run exists, then
// the record engine.
func (s *Server) withRun(h handlerFunc) handlerFunc {
	return func(c *call) (int, any, error) {
		if _, _, err := c.loadRun(); err != nil {
			return 0, nil, err
		}
		return h(c)
	}
}
