package api

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"reeve.dev/reeve/daemon/wire"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// The detection rules. Each reads a bounded window of the workspace's
// records through store.InsightSignals and returns findings; the store
// merges them into the active insights (idempotent). The thresholds are
// documented in docs/insights.md.
const (
	insightWindow      = 7 * 24 * time.Hour // what the event-like rules look back on
	denialThreshold    = 3                  // denials of one tool in the window
	failedRunThreshold = 3                  // failed runs of one workflow in the window
	installStaleAfter  = 7 * 24 * time.Hour // an install not seen this long
	defaultWarnAt      = 0.8                // of the hard cap, unless budget_policy.warn_at_fraction says otherwise
	signalLimit        = 2000               // rows one rule reads
	// DefaultInsightInterval is how often the server runs detection over
	// every workspace by itself (Options.InsightInterval).
	DefaultInsightInterval = time.Hour
)

// warnFraction is the fraction of the cap the budget rule fires at.
func warnFraction(p store.BudgetPolicy) float64 {
	if p.WarnAt > 0 {
		return p.WarnAt
	}
	return defaultWarnAt
}

// detectInsights runs every rule over ws and applies the findings. The
// run is audited when asked by a person (manual), or when the periodic
// run raised or changed an insight.
func (s *Server) detectInsights(ctx context.Context, st store.Insights, ws store.Workspace, actor string, manual bool) (store.DetectResult, error) {
	now := s.opts.Now().UTC()
	var findings []store.InsightFinding
	var ran []string // the rules whose read was complete: their cleared insights resolve
	for _, r := range []struct {
		name string
		find ruleFunc
	}{
		{sdk.RuleRepeatedDenials, s.denialFindings}, {sdk.RuleBudgetNearCap, s.budgetFindings}, {sdk.RuleInstallStale, s.staleInstallFindings},
		{sdk.RuleRunsFailing, s.failingRunFindings}, {sdk.RuleUnguardedSession, s.unguardedFindings},
	} {
		f, complete, err := r.find(ctx, st, ws, now)
		if err != nil {
			return store.DetectResult{}, err
		}
		findings = append(findings, f...)
		if complete {
			ran = append(ran, r.name)
		}
	}
	trigger := "schedule"
	if manual {
		trigger = "manual"
	}
	audit := func(r store.DetectResult) store.AuditEntry {
		if !manual && r.Created == 0 && r.Updated == 0 && len(r.Resolved) == 0 {
			return store.AuditEntry{}
		}
		resolved := make([]map[string]string, 0, len(r.Resolved))
		for _, i := range r.Resolved {
			resolved = append(resolved, map[string]string{"id": i.ID, "rule": i.Rule, "subject": i.Subject})
		}
		d, _ := json.Marshal(map[string]any{"trigger": trigger, "findings": len(findings), "created": r.Created, "updated": r.Updated, "unchanged": r.Unchanged, "resolved": resolved})
		return store.AuditEntry{WorkspaceID: ws.ID, Actor: actor, Action: "insights.detect", Target: "insights", Detail: d, CreatedAt: now}
	}
	return st.ApplyInsightFindings(ctx, ws.ID, findings, ran, now, audit)
}

// ruleFunc is one detection rule: its findings at now, and whether its
// read was complete (not cut at signalLimit, policy readable), so that a
// subject it did not find has cleared.
type ruleFunc func(ctx context.Context, st store.Insights, ws store.Workspace, now time.Time) (findings []store.InsightFinding, complete bool, err error)

// DetectAllInsights runs detection over every live workspace once (the
// periodic run); it returns how many insights it raised.
func (s *Server) DetectAllInsights(ctx context.Context) (int, error) {
	st, ok := s.st.(store.Insights)
	if !ok {
		return 0, nil
	}
	ids, err := st.WorkspaceIDs(ctx)
	if err != nil {
		return 0, err
	}
	created := 0
	for _, id := range ids {
		ws, err := s.st.Workspace(ctx, id)
		if err != nil {
			continue // deleted meanwhile
		}
		res, err := s.detectInsights(ctx, st, ws, "system:insights", false)
		if err != nil {
			return created, fmt.Errorf("detect insights in %s: %w", id, err)
		}
		created += res.Created
	}
	return created, nil
}

// RunInsightDetector runs DetectAllInsights at start and then every
// Options.InsightInterval until ctx ends (not at all when it is
// negative). Every replica may run it: detection is idempotent.
func (s *Server) RunInsightDetector(ctx context.Context) {
	every := s.opts.InsightInterval
	switch {
	case every < 0:
		return
	case every == 0:
		every = DefaultInsightInterval
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if n, err := s.DetectAllInsights(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("detect insights", "err", err)
		} else if n > 0 {
			s.log.Info("insights raised", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sessionOfEvents is the session id of a sessions/<id>/events collection.
func sessionOfEvents(coll string) string {
	return strings.TrimSuffix(strings.TrimPrefix(coll, "sessions/"), "/events")
}

// denialFindings: one tool denied denialThreshold times or more in the
// window, across the workspace's synced sessions. Evidence: the sessions
// and the audit entries of the decisions.
func (s *Server) denialFindings(ctx context.Context, st store.Insights, ws store.Workspace, now time.Time) ([]store.InsightFinding, bool, error) {
	since := now.Add(-insightWindow)
	recs, err := st.PermissionDecisions(ctx, ws.ID, since, signalLimit)
	if err != nil {
		return nil, false, err
	}
	audits, err := st.PermissionDecisionAudit(ctx, ws.ID, since, signalLimit)
	if err != nil {
		return nil, false, err
	}
	auditOf := map[string]store.AuditEntry{} // "<session>/<seq>"
	for _, a := range audits {
		var d struct {
			Seq int64 `json:"seq"`
		}
		_ = json.Unmarshal(a.Detail, &d)
		auditOf[strings.TrimPrefix(a.Target, "sessions/")+"/"+strconv.FormatInt(d.Seq, 10)] = a
	}
	type denials struct {
		n        int64
		sessions []string
		seen     map[string]bool
		by       map[string]int
		evidence []store.EvidenceLink
	}
	byTool := map[string]*denials{}
	// Oldest first, so evidence reads in the order it happened.
	for i := len(recs) - 1; i >= 0; i-- {
		r := recs[i]
		var ev struct {
			Seq  int64  `json:"seq"`
			Kind string `json:"kind"`
			Data struct {
				Tool      string    `json:"tool"`
				Decision  string    `json:"decision"`
				DecidedBy string    `json:"decided_by"`
				At        time.Time `json:"at"`
			} `json:"data"`
		}
		if json.Unmarshal(r.Attributes, &ev) != nil || ev.Kind != wire.KindPermissionDecision || ev.Data.Decision != "deny" || ev.Data.Tool == "" {
			continue // metadata-only uploads carry no tool: they cannot count
		}
		d := byTool[ev.Data.Tool]
		if d == nil {
			d = &denials{seen: map[string]bool{}, by: map[string]int{}}
			byTool[ev.Data.Tool] = d
		}
		d.n++
		by := ev.Data.DecidedBy
		if i := strings.IndexByte(by, ':'); i > 0 {
			by = by[:i]
		}
		d.by[by]++
		sid := sessionOfEvents(r.Collection)
		at := r.CreatedAt
		if !d.seen[sid] {
			d.seen[sid] = true
			d.sessions = append(d.sessions, sid)
			d.evidence = append(d.evidence, store.EvidenceLink{Kind: "session", ID: sid, Note: "denied " + ev.Data.Tool, At: &at})
		}
		if a, ok := auditOf[sid+"/"+strconv.FormatInt(ev.Seq, 10)]; ok {
			d.evidence = append(d.evidence, store.EvidenceLink{Kind: "audit", ID: a.ID, Note: fmt.Sprintf("%s denied (event %d of session %s)", ev.Data.Tool, ev.Seq, sid), At: &at})
		}
	}
	var out []store.InsightFinding
	for tool, d := range byTool {
		if d.n < denialThreshold {
			continue
		}
		detail, _ := json.Marshal(map[string]any{"tool": tool, "denials": d.n, "sessions": len(d.sessions), "decided_by": d.by, "window_days": int(insightWindow.Hours() / 24)})
		out = append(out, store.InsightFinding{Rule: sdk.RuleRepeatedDenials, Subject: "tool:" + tool, Severity: "warning",
			Title:  fmt.Sprintf("%s was denied %d times in %d sessions over the last 7 days", tool, d.n, len(d.sessions)),
			Detail: detail, Evidence: d.evidence, Count: d.n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Subject < out[j].Subject })
	return out, len(recs) < signalLimit, nil
}

// budgetFindings: the current period's ledger total at or past the warn
// fraction of the hard cap (critical once at the cap).
func (s *Server) budgetFindings(ctx context.Context, st store.Insights, ws store.Workspace, now time.Time) ([]store.InsightFinding, bool, error) {
	pol, err := store.ParseBudgetPolicy(ws.BudgetPolicy)
	if err != nil {
		return nil, false, nil // unreadable: no finding, and no conclusion either
	}
	if pol.HardCap == nil || *pol.HardCap <= 0 {
		return nil, true, nil // no cap to be near
	}
	period := store.PeriodKey(pol.Period, now)
	per, err := s.st.LedgerPeriod(ctx, ws.ID, period)
	if err != nil {
		return nil, false, err
	}
	warn := warnFraction(pol)
	fraction := float64(per.Total) / float64(*pol.HardCap)
	if fraction < warn {
		return nil, true, nil
	}
	sev := "warning"
	if per.Total >= *pol.HardCap {
		sev = "critical"
	}
	pct := int(math.Floor(fraction * 100))
	detail, _ := json.Marshal(map[string]any{"period": period, "spent_usd": per.Total.String(), "hard_cap_usd": pol.HardCap.String(),
		"fraction_used": fraction, "warn_at_fraction": warn, "entries": per.Entries})
	return []store.InsightFinding{{Rule: sdk.RuleBudgetNearCap, Subject: "period:" + period, Severity: sev,
		Title:  fmt.Sprintf("Spend in %s is at %d%% of the $%s hard cap ($%s)", period, pct, pol.HardCap.String(), per.Total.String()),
		Detail: detail, Count: per.Entries,
		Evidence: []store.EvidenceLink{{Kind: "ledger_period", ID: period, Note: fmt.Sprintf("$%s of $%s", per.Total.String(), pol.HardCap.String())}}}}, true, nil
}

// staleInstallFindings: a paired machine (not detached) whose last
// heartbeat, or pairing when it never sent one, is installStaleAfter old.
func (s *Server) staleInstallFindings(ctx context.Context, _ store.Insights, ws store.Workspace, now time.Time) ([]store.InsightFinding, bool, error) {
	ins, err := s.st.Installs(ctx, ws.ID)
	if err != nil {
		return nil, false, err
	}
	var out []store.InsightFinding
	for _, in := range ins {
		seen := in.CreatedAt
		if in.LastSeenAt != nil {
			seen = *in.LastSeenAt
		}
		if now.Sub(seen) < installStaleAfter {
			continue
		}
		days := int(now.Sub(seen).Hours() / 24)
		detail, _ := json.Marshal(map[string]any{"install_id": in.ID, "name": in.Name, "last_seen_at": in.LastSeenAt, "paired_at": in.CreatedAt})
		out = append(out, store.InsightFinding{Rule: sdk.RuleInstallStale, Subject: "install:" + in.ID, Severity: "info",
			Title:  fmt.Sprintf("Machine %q has not been seen for %d days", in.Name, days),
			Detail: detail, Count: 1,
			Evidence: []store.EvidenceLink{{Kind: "install", ID: in.ID, Note: "last seen", At: &seen}}})
	}
	return out, true, nil
}

// workflowKey names the workflow a run belongs to: its definition id,
// else its definition's name, else (an ad hoc run) its agent.
func workflowKey(r store.WorkflowRun) (key, label string) {
	var sp runSpec
	_ = json.Unmarshal(r.Spec, &sp)
	switch {
	case sp.DefinitionID != "":
		return "workflow:" + sp.DefinitionID, "workflow " + sp.DefinitionID
	case sp.Definition != "":
		return "workflow:" + sp.Definition, "workflow " + sp.Definition
	}
	agent := r.Agent
	if agent == "" {
		agent = "any"
	}
	return "agent:" + agent, "ad hoc runs of " + agent
}

// failingRunFindings: failedRunThreshold or more runs of one workflow
// finished failed in the window.
func (s *Server) failingRunFindings(ctx context.Context, st store.Insights, ws store.Workspace, now time.Time) ([]store.InsightFinding, bool, error) {
	runs, err := st.FailedRunsSince(ctx, ws.ID, now.Add(-insightWindow), signalLimit)
	if err != nil {
		return nil, false, err
	}
	type failing struct {
		label    string
		evidence []store.EvidenceLink
		errs     map[string]int
	}
	by := map[string]*failing{}
	for i := len(runs) - 1; i >= 0; i-- {
		r := runs[i]
		key, label := workflowKey(r)
		f := by[key]
		if f == nil {
			f = &failing{label: label, errs: map[string]int{}}
			by[key] = f
		}
		var oc runOutcome
		_ = json.Unmarshal(r.Outcome, &oc)
		note := "failed"
		if oc.Error != "" {
			note = "failed: " + oc.Error
			if len(note) > 200 {
				note = note[:200]
			}
			f.errs[oc.Error]++
		} else if oc.ExitCode != nil {
			note = fmt.Sprintf("failed: exit code %d", *oc.ExitCode)
		}
		f.evidence = append(f.evidence, store.EvidenceLink{Kind: "run", ID: r.ID, Note: note, At: r.FinishedAt})
	}
	var out []store.InsightFinding
	for key, f := range by {
		n := int64(len(f.evidence))
		if n < failedRunThreshold {
			continue
		}
		detail, _ := json.Marshal(map[string]any{"workflow": key, "failed_runs": n, "window_days": int(insightWindow.Hours() / 24), "errors": f.errs})
		out = append(out, store.InsightFinding{Rule: sdk.RuleRunsFailing, Subject: key, Severity: "warning",
			Title:  fmt.Sprintf("%d runs of %s failed over the last 7 days", n, f.label),
			Detail: detail, Evidence: f.evidence, Count: n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Subject < out[j].Subject })
	return out, len(runs) < signalLimit, nil
}

// unguardedFindings: daemon sessions, changed in the window, whose synced
// governance says no policy or human decided their tool use; one insight
// per machine.
func (s *Server) unguardedFindings(ctx context.Context, st store.Insights, ws store.Workspace, now time.Time) ([]store.InsightFinding, bool, error) {
	recs, err := st.SessionsUpdatedSince(ctx, ws.ID, now.Add(-insightWindow), signalLimit)
	if err != nil {
		return nil, false, err
	}
	type unguarded struct {
		evidence []store.EvidenceLink
		agents   map[string]int
		modes    map[string]int
	}
	by := map[string]*unguarded{}
	for i := len(recs) - 1; i >= 0; i-- {
		r := recs[i]
		var a struct {
			Source     string `json:"source"`
			InstallID  string `json:"install_id"`
			Agent      string `json:"agent"`
			Title      string `json:"title"`
			Governance *struct {
				Guarded bool   `json:"guarded"`
				Mode    string `json:"mode"`
			} `json:"governance"`
		}
		if json.Unmarshal(r.Attributes, &a) != nil || a.Source != "daemon" || a.Governance == nil || a.Governance.Guarded {
			continue
		}
		u := by[a.InstallID]
		if u == nil {
			u = &unguarded{agents: map[string]int{}, modes: map[string]int{}}
			by[a.InstallID] = u
		}
		u.agents[a.Agent]++
		if a.Governance.Mode != "" {
			u.modes[a.Governance.Mode]++
		}
		at := r.UpdatedAt
		u.evidence = append(u.evidence, store.EvidenceLink{Kind: "session", ID: r.ID, Note: strings.TrimSpace(a.Title + " ran unguarded"), At: &at})
	}
	var out []store.InsightFinding
	for install, u := range by {
		n := int64(len(u.evidence))
		detail, _ := json.Marshal(map[string]any{"install_id": install, "sessions": n, "agents": u.agents, "modes": u.modes, "window_days": int(insightWindow.Hours() / 24)})
		ev := u.evidence
		if install != "" {
			ev = append([]store.EvidenceLink{{Kind: "install", ID: install}}, ev...)
		}
		out = append(out, store.InsightFinding{Rule: sdk.RuleUnguardedSession, Subject: "install:" + install, Severity: "warning",
			Title:  fmt.Sprintf("%d %s on one machine ran unguarded over the last 7 days", n, map[bool]string{true: "session", false: "sessions"}[n == 1]),
			Detail: detail, Evidence: ev, Count: n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Subject < out[j].Subject })
	return out, len(recs) < signalLimit, nil
}
