package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

func finding(subject string, ids ...string) InsightFinding {
	f := InsightFinding{Rule: "repeated_denials", Subject: subject, Title: "Bash denied", Severity: "warning", Detail: json.RawMessage(`{"tool":"Bash"}`), Count: int64(len(ids))}
	for _, id := range ids {
		f.Evidence = append(f.Evidence, EvidenceLink{Kind: "session", ID: id})
	}
	return f
}

// Insights on both engines: detection is idempotent (an active insight
// is updated, never duplicated, also when 20 detections race); a closed
// insight is raised again only by new evidence; status changes and
// conversion are checked under the row lock.
func TestInsightsConformance(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		ctx := context.Background()
		s := e.open(t)
		now := time.Now().UTC().Truncate(time.Second)
		audited := 0
		aud := func(r DetectResult) AuditEntry {
			audited++
			return AuditEntry{WorkspaceID: "w1", Actor: "test", Action: "insights.detect", Target: "insights", Detail: json.RawMessage(fmt.Sprintf(`{"created":%d}`, r.Created))}
		}
		res, err := s.ApplyInsightFindings(ctx, "w1", []InsightFinding{finding("tool:Bash", "s1", "s2", "s3")}, nil, now, aud)
		if err != nil || res.Created != 1 || len(res.Insights) != 1 {
			t.Fatalf("first detection: %+v %v", res, err)
		}
		first := res.Insights[0]
		if first.Status != InsightOpen || first.Count != 3 || len(first.Evidence) != 3 || !first.FirstSeenAt.Equal(now) {
			t.Fatalf("created: %+v", first)
		}
		// Again, same facts: unchanged, same insight, last seen moves.
		res, err = s.ApplyInsightFindings(ctx, "w1", []InsightFinding{finding("tool:Bash", "s1", "s2", "s3")}, nil, now.Add(time.Minute), nil)
		if err != nil || res.Created != 0 || res.Unchanged != 1 || res.Insights[0].ID != first.ID {
			t.Fatalf("second detection: %+v %v", res, err)
		}
		// New evidence: updated, merged.
		res, err = s.ApplyInsightFindings(ctx, "w1", []InsightFinding{finding("tool:Bash", "s3", "s4")}, nil, now.Add(2*time.Minute), nil)
		if err != nil || res.Updated != 1 {
			t.Fatalf("third detection: %+v %v", res, err)
		}
		got, err := s.Insight(ctx, "w1", first.ID)
		if err != nil || len(got.Evidence) != 4 || got.Count != 2 || !got.LastSeenAt.Equal(now.Add(2*time.Minute)) || !got.FirstSeenAt.Equal(now) {
			t.Fatalf("after merge: %+v %v", got, err)
		}
		if _, err := s.Insight(ctx, "w2", first.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("another workspace reads the insight: %v", err)
		}

		// Twenty detections at once of a new subject: one insight.
		var wg sync.WaitGroup
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := s.ApplyInsightFindings(ctx, "w1", []InsightFinding{finding("tool:Write", "s9"), finding("tool:Bash", "s1")}, nil, now, nil); err != nil {
					t.Errorf("concurrent detection: %v", err)
				}
			}()
		}
		wg.Wait()
		list, err := s.ListInsights(ctx, "w1", "", "", ListOptions{})
		if err != nil || len(list) != 2 {
			t.Fatalf("after 20 concurrent detections: %d insights %v", len(list), err)
		}

		// Dismiss: the same evidence does not raise it again; new does.
		dismissed, err := s.UpdateInsight(ctx, "w1", first.ID, func(i *Insight) error {
			at := now
			i.Status, i.StatusChangedBy, i.StatusChangedAt, i.UpdatedAt = InsightDismissed, "user:1", &at, now
			return nil
		}, AuditEntry{WorkspaceID: "w1", Actor: "user:1", Action: "insight.update", Target: "insights/" + first.ID})
		if err != nil || dismissed.Status != InsightDismissed || dismissed.StatusChangedBy != "user:1" {
			t.Fatalf("dismiss: %+v %v", dismissed, err)
		}
		res, _ = s.ApplyInsightFindings(ctx, "w1", []InsightFinding{finding("tool:Bash", "s1", "s4")}, nil, now, nil)
		if res.Created != 0 || res.Unchanged != 1 {
			t.Fatalf("dismissed insight raised again by old evidence: %+v", res)
		}
		res, _ = s.ApplyInsightFindings(ctx, "w1", []InsightFinding{finding("tool:Bash", "s1", "s5")}, nil, now, nil)
		if res.Created != 1 || res.Insights[0].ID == first.ID {
			t.Fatalf("new evidence after dismissal: %+v", res)
		}
		second := res.Insights[0]
		// Reopening the dismissed one while the new one is active: conflict.
		_, err = s.UpdateInsight(ctx, "w1", first.ID, func(i *Insight) error { i.Status = InsightOpen; return nil }, AuditEntry{})
		if !errors.Is(err, ErrConflict) {
			t.Fatalf("reopen beside an active twin: %v", err)
		}
		if _, err := s.UpdateInsight(ctx, "w1", "nope", func(*Insight) error { return nil }, AuditEntry{}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("update unknown: %v", err)
		}

		// Convert: only accepted, once.
		build := func(i Insight, p *ReviewPacket) { p.Title, p.CreatedBy = "Review: "+i.Title, "user:1" }
		if _, _, err := s.ConvertInsight(ctx, "w1", second.ID, now, build, AuditEntry{}); !errors.Is(err, ErrInsightNotAccepted) || !errors.Is(err, ErrConflict) {
			t.Fatalf("convert an open insight: %v", err)
		}
		if _, err := s.UpdateInsight(ctx, "w1", second.ID, func(i *Insight) error { i.Status = InsightAccepted; return nil }, AuditEntry{}); err != nil {
			t.Fatal(err)
		}
		conv, p, err := s.ConvertInsight(ctx, "w1", second.ID, now, build, AuditEntry{WorkspaceID: "w1", Actor: "user:1", Action: "insight.convert"})
		if err != nil || conv.Status != InsightConverted || conv.ReviewPacketID != p.ID || p.InsightID != second.ID || p.Status != PacketPending || len(p.Evidence) != 2 {
			t.Fatalf("convert: %+v %+v %v", conv, p, err)
		}
		if _, _, err := s.ConvertInsight(ctx, "w1", second.ID, now, build, AuditEntry{}); !errors.Is(err, ErrInsightNotAccepted) {
			t.Fatalf("convert twice: %v", err)
		}
		if _, _, err := s.ConvertInsight(ctx, "w2", second.ID, now, build, AuditEntry{}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("convert from another workspace: %v", err)
		}
		counts, err := s.InsightCounts(ctx, "w1")
		if err != nil || len(counts) != 3 {
			t.Fatalf("counts: %+v %v", counts, err)
		}

		// Review packets: created, decided once.
		direct := ReviewPacket{WorkspaceID: "w1", Title: "Manual", CreatedBy: "user:1", CreatedAt: now, UpdatedAt: now, Evidence: []EvidenceLink{{Kind: "install", ID: "i1"}}}
		if err := s.CreateReviewPacket(ctx, &direct, AuditEntry{WorkspaceID: "w1", Actor: "user:1", Action: "review_packet.create"}); err != nil || direct.Seq == 0 {
			t.Fatalf("create packet: %v", err)
		}
		decide := func(p *ReviewPacket) error {
			if p.Status != PacketPending {
				return ErrConflict
			}
			at := now
			p.Status, p.DecidedBy, p.DecidedAt, p.DecisionReason, p.UpdatedAt = PacketApproved, "user:1", &at, "fine", now
			return nil
		}
		var won, lost int
		var mu sync.Mutex
		for range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := s.DecideReviewPacket(ctx, "w1", direct.ID, decide, AuditEntry{WorkspaceID: "w1", Actor: "user:1", Action: "review_packet.decide"})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					won++
				case errors.Is(err, ErrConflict):
					lost++
				default:
					t.Errorf("decide: %v", err)
				}
			}()
		}
		wg.Wait()
		if won != 1 || lost != 9 {
			t.Fatalf("10 racing decisions: %d won, %d lost", won, lost)
		}
		pk, err := s.ReviewPackets(ctx, "w1", "", ListOptions{})
		if err != nil || len(pk) != 2 {
			t.Fatalf("packets: %d %v", len(pk), err)
		}
		if pc, _ := s.ReviewPacketCounts(ctx, "w1"); pc[PacketApproved] != 1 || pc[PacketPending] != 1 {
			t.Fatalf("packet counts: %v", pc)
		}
		if _, err := s.ReviewPacket(ctx, "w2", direct.ID); !errors.Is(err, ErrNotFound) {
			t.Fatalf("packet of another workspace: %v", err)
		}
		if audited == 0 {
			t.Fatal("the detection audit was not asked for")
		}
	})
}

// The signals the rules read: decisions among synced events, audit by
// action, records changed in the window, failed runs.
func TestInsightSignals(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		ctx := context.Background()
		s := e.open(t)
		now := time.Now().UTC()
		old := now.Add(-30 * 24 * time.Hour)
		mk := func(coll, key, attrs string, at time.Time) {
			r := Record{WorkspaceID: "w1", Collection: coll, NaturalKey: key, Attributes: json.RawMessage(attrs), CreatedBy: "t", CreatedAt: at, UpdatedAt: at}
			if err := s.CreateRecord(ctx, &r, AuditEntry{WorkspaceID: "w1", Actor: "t", Action: "session.permission-decision", Target: coll, CreatedAt: at}); err != nil {
				t.Fatal(err)
			}
		}
		mk("sessions/S1/events", "1", `{"data":{"decision":"deny","tool":"Bash"},"kind":"permission-decision","seq":1}`, now)
		mk("sessions/S1/events", "2", `{"data":{"text":"hi"},"kind":"message","seq":2}`, now)
		mk("sessions/S2/events", "1", `{"data":{"decision":"deny","tool":"Bash"},"kind":"permission-decision","seq":1}`, old)
		mk("sessions", "S1", `{"source":"daemon"}`, now)
		mk("sessions", "S2", `{"source":"daemon"}`, old)
		recs, err := s.PermissionDecisions(ctx, "w1", now.Add(-time.Hour), 100)
		if err != nil || len(recs) != 1 || recs[0].Collection != "sessions/S1/events" {
			t.Fatalf("decisions: %+v %v", recs, err)
		}
		if recs, _ := s.PermissionDecisions(ctx, "w2", old, 100); len(recs) != 0 {
			t.Fatal("decisions leak across workspaces")
		}
		if recs, err := s.SessionsUpdatedSince(ctx, "w1", now.Add(-time.Hour), 100); err != nil || len(recs) != 1 || recs[0].NaturalKey != "S1" {
			t.Fatalf("sessions updated: %+v %v", recs, err)
		}
		if au, err := s.PermissionDecisionAudit(ctx, "w1", now.Add(-time.Hour), 100); err != nil || len(au) != 3 {
			t.Fatalf("audit since: %d %v", len(au), err)
		}
		wf := Workflows(s)
		for i, st := range []string{"failed", "failed", "succeeded"} {
			r := WorkflowRun{ID: fmt.Sprintf("RUN%d", i), WorkspaceID: "w1", Status: "queued", Tags: []string{}, MaxAttempts: 1, Spec: json.RawMessage(`{}`), CreatedBy: "t", CreatedAt: now, UpdatedAt: now}
			if err := wf.CreateRun(ctx, &r, nil, AuditEntry{}); err != nil {
				t.Fatal(err)
			}
			fin := now
			if i == 1 {
				fin = old
			}
			if _, err := wf.UpdateRun(ctx, "w1", r.ID, func(r *WorkflowRun) ([]RunEvent, error) {
				r.Status, r.FinishedAt = st, &fin
				return nil, nil
			}, AuditEntry{}); err != nil {
				t.Fatal(err)
			}
		}
		runs, err := s.FailedRunsSince(ctx, "w1", now.Add(-time.Hour), 100)
		if err != nil || len(runs) != 1 || runs[0].ID != "RUN0" {
			t.Fatalf("failed runs: %+v %v", runs, err)
		}
		if err := s.CreateWorkspace(ctx, Workspace{ID: "wsA", Name: "a", CreatedAt: now, UpdatedAt: now}, mustUser(t, s)); err != nil {
			t.Fatal(err)
		}
		if ids, err := s.WorkspaceIDs(ctx); err != nil || len(ids) != 1 || ids[0] != "wsA" {
			t.Fatalf("workspace ids: %v %v", ids, err)
		}
	})
}

func mustUser(t *testing.T, s *DB) int64 {
	t.Helper()
	u, _, err := s.EnsureUser(context.Background(), "owner@insights.example")
	if err != nil {
		t.Fatal(err)
	}
	return u.ID
}

// Detection resolves an open insight whose rule, having run, no longer
// finds its subject: dismissed by InsightResolver with reason
// InsightResolved, once, on both engines. Rules that did not run,
// accepted and converted insights are left alone; a resolved subject
// found again is raised again even by the evidence it had.
func TestInsightsResolvedWhenCleared(t *testing.T) {
	eachEngine(t, func(t *testing.T, e engine) {
		ctx := context.Background()
		s := e.open(t)
		now := time.Now().UTC().Truncate(time.Second)
		const rd = "repeated_denials"
		budget := InsightFinding{Rule: "budget_near_cap", Subject: "period:2026-10", Title: "near cap", Count: 1, Evidence: []EvidenceLink{{Kind: "ledger_period", ID: "2026-10"}}}
		res, err := s.ApplyInsightFindings(ctx, "w1", []InsightFinding{finding("tool:Bash", "s1"), finding("tool:Write", "s2"), finding("tool:Read", "s3"), finding("tool:Edit", "s4"), budget}, nil, now, nil)
		if err != nil || res.Created != 5 {
			t.Fatalf("raise: %+v %v", res, err)
		}
		ids := map[string]string{}
		for _, i := range res.Insights {
			ids[i.Subject] = i.ID
		}
		setStatus := func(id, status string) {
			t.Helper()
			if _, err := s.UpdateInsight(ctx, "w1", id, func(i *Insight) error { i.Status = status; return nil }, AuditEntry{}); err != nil {
				t.Fatal(err)
			}
		}
		setStatus(ids["tool:Read"], InsightAccepted)
		setStatus(ids["tool:Edit"], InsightAccepted)
		if _, _, err := s.ConvertInsight(ctx, "w1", ids["tool:Edit"], now, func(Insight, *ReviewPacket) {}, AuditEntry{}); err != nil {
			t.Fatal(err)
		}

		// Only Write is still found: Bash resolves; Read (accepted), Edit
		// (converted) and the budget insight (its rule did not run) stay.
		later := now.Add(time.Hour)
		aud := DetectResult{}
		res, err = s.ApplyInsightFindings(ctx, "w1", []InsightFinding{finding("tool:Write", "s2")}, []string{rd}, later, func(r DetectResult) AuditEntry {
			aud = r
			return AuditEntry{WorkspaceID: "w1", Actor: InsightResolver, Action: "insights.detect", Target: "insights"}
		})
		if err != nil || len(res.Resolved) != 1 || res.Resolved[0].ID != ids["tool:Bash"] || res.Unchanged != 1 || len(aud.Resolved) != 1 {
			t.Fatalf("resolve: %+v %v", res, err)
		}
		want := map[string]string{"tool:Bash": InsightDismissed, "tool:Write": InsightOpen, "tool:Read": InsightAccepted, "tool:Edit": InsightConverted, "period:2026-10": InsightOpen}
		for subj, st := range want {
			got, err := s.Insight(ctx, "w1", ids[subj])
			if err != nil || got.Status != st {
				t.Fatalf("%s: %+v %v, want %s", subj, got, err, st)
			}
		}
		bash, _ := s.Insight(ctx, "w1", ids["tool:Bash"])
		if bash.StatusChangedBy != InsightResolver || bash.StatusReason != InsightResolved || bash.StatusChangedAt == nil || !bash.StatusChangedAt.Equal(later) || !bash.LastSeenAt.Equal(now) {
			t.Fatalf("resolved insight: %+v", bash)
		}
		// Again: nothing left to resolve. Another workspace's run touches none.
		if res, err = s.ApplyInsightFindings(ctx, "w1", []InsightFinding{finding("tool:Write", "s2")}, []string{rd}, later, nil); err != nil || len(res.Resolved) != 0 {
			t.Fatalf("second resolve: %+v %v", res, err)
		}
		if res, err = s.ApplyInsightFindings(ctx, "w2", nil, []string{rd, "budget_near_cap"}, later, nil); err != nil || len(res.Resolved) != 0 {
			t.Fatalf("another workspace resolved: %+v %v", res, err)
		}
		// The budget rule runs and finds nothing: its insight resolves.
		if res, err = s.ApplyInsightFindings(ctx, "w1", []InsightFinding{finding("tool:Write", "s2")}, []string{rd, "budget_near_cap"}, later, nil); err != nil || len(res.Resolved) != 1 || res.Resolved[0].Subject != "period:2026-10" {
			t.Fatalf("budget resolve: %+v %v", res, err)
		}

		// Bash found again with the very evidence it had: a new open insight.
		res, err = s.ApplyInsightFindings(ctx, "w1", []InsightFinding{finding("tool:Bash", "s1"), finding("tool:Write", "s2")}, []string{rd}, later.Add(time.Hour), nil)
		if err != nil || res.Created != 1 || len(res.Resolved) != 0 {
			t.Fatalf("raise again: %+v %v", res, err)
		}
		var again Insight
		for _, i := range res.Insights {
			if i.Subject == "tool:Bash" {
				again = i
			}
		}
		if again.ID == "" || again.ID == ids["tool:Bash"] || again.Status != InsightOpen {
			t.Fatalf("raised again: %+v", res.Insights)
		}
		// A person reopening the resolved one beside it: conflict, as any twin.
		if _, err := s.UpdateInsight(ctx, "w1", ids["tool:Bash"], func(i *Insight) error { i.Status = InsightOpen; return nil }, AuditEntry{}); !errors.Is(err, ErrConflict) {
			t.Fatalf("reopen beside the raised twin: %v", err)
		}

		// Twenty detections at once, half finding Glob and half not: every
		// run succeeds, each resolution is reported by exactly one run, and
		// at most one Glob insight is active at the end.
		if _, err := s.ApplyInsightFindings(ctx, "w1", []InsightFinding{finding("tool:Glob", "g1")}, nil, now, nil); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		reported := 0
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var f []InsightFinding
				if i%2 == 1 {
					f = []InsightFinding{finding("tool:Glob", "g1")}
				}
				r, err := s.ApplyInsightFindings(ctx, "w1", f, []string{rd}, later, nil)
				if err != nil {
					t.Errorf("concurrent detection: %v", err)
					return
				}
				mu.Lock()
				for _, x := range r.Resolved {
					if x.Subject == "tool:Glob" {
						reported++
					}
				}
				mu.Unlock()
			}()
		}
		wg.Wait()
		globs, err := s.ListInsights(ctx, "w1", "", rd, ListOptions{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		active, resolved := 0, 0
		for _, i := range globs {
			switch {
			case i.Subject != "tool:Glob":
			case i.Active():
				active++
			case i.resolvedByDetection():
				resolved++
			}
		}
		if active > 1 || resolved != reported || resolved == 0 {
			t.Fatalf("after 20 racing detections: %d active, %d resolved, %d reported resolved", active, resolved, reported)
		}
	})
}
