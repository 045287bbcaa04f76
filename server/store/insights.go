package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Insights and review packets (migration 0010, docs/insights.md). The API
// runs the detection rules over the workspace's records (the signals
// below) and hands the store its findings; the store keeps at most one
// active insight per (workspace, rule, subject), so detection is
// idempotent however often, and however concurrently, it runs.

// Insight statuses. Open and accepted insights are active: detection
// updates them. Dismissed and converted ones are closed.
const (
	InsightOpen      = "open"
	InsightAccepted  = "accepted"
	InsightDismissed = "dismissed"
	InsightConverted = "converted"
)

// Review packet statuses: pending until decided once.
const (
	PacketPending  = "pending"
	PacketApproved = "approved"
	PacketRejected = "rejected"
)

// An open insight whose rule no longer finds its subject is resolved by
// detection: dismissed, by InsightResolver, with reason InsightResolved.
// Such an insight is raised again as soon as its rule finds the subject
// again, whatever the evidence (a person did not decide about it).
const (
	InsightResolver = "system:insights"
	InsightResolved = "resolved"
)

// ErrInsightNotAccepted: only an accepted insight is converted.
var ErrInsightNotAccepted = fmt.Errorf("%w: the insight is not accepted", ErrConflict)

// EvidenceLink points at a record behind an insight or in a review
// packet. Kind is session, run, ledger_period, install or audit; ID the
// record's id (the period key for ledger_period).
type EvidenceLink struct {
	Kind string     `json:"kind"`
	ID   string     `json:"id"`
	Note string     `json:"note,omitempty"`
	At   *time.Time `json:"at,omitempty"`
}

func (l EvidenceLink) key() string { return l.Kind + "\x00" + l.ID }

// maxEvidence bounds the links one insight keeps (the newest win).
const maxEvidence = 100

// Insight is one finding of a detection rule.
type Insight struct {
	Seq                     int64
	ID, WorkspaceID         string
	Rule, Subject           string
	Status, Title, Severity string
	Detail                  json.RawMessage
	Evidence                []EvidenceLink
	Count                   int64
	FirstSeenAt, LastSeenAt time.Time
	StatusChangedBy         string
	StatusChangedAt         *time.Time
	StatusReason            string
	ReviewPacketID          string
	CreatedAt, UpdatedAt    time.Time
}

// Active reports whether detection still updates the insight.
func (i Insight) Active() bool { return i.Status == InsightOpen || i.Status == InsightAccepted }

// InsightFinding is what one rule found for one subject in one run.
type InsightFinding struct {
	Rule, Subject, Title, Severity string
	Detail                         json.RawMessage
	Evidence                       []EvidenceLink
	// Count is how many occurrences the rule counted (denials, failed
	// runs, unguarded sessions; 1 for a state such as a stale install).
	Count int64
}

// DetectResult says what applying findings did.
type DetectResult struct {
	Created, Updated, Unchanged int
	// Insights are the active insights the findings created or updated.
	Insights []Insight
	// Resolved are the open insights this run dismissed because their
	// rule no longer finds their subject.
	Resolved []Insight
}

// resolvedByDetection reports whether detection, not a person, closed i.
func (i Insight) resolvedByDetection() bool {
	return i.Status == InsightDismissed && i.StatusChangedBy == InsightResolver && i.StatusReason == InsightResolved
}

// InsightCount is how many insights of a rule are in a status.
type InsightCount struct {
	Rule, Status string
	N            int64
}

// ReviewPacket gathers evidence for one decision.
type ReviewPacket struct {
	Seq                       int64
	ID, WorkspaceID           string
	Title, Summary, Status    string
	InsightID                 string
	Evidence                  []EvidenceLink
	Detail                    json.RawMessage
	CreatedBy                 string
	CreatedAt, UpdatedAt      time.Time
	DecidedBy, DecisionReason string
	DecidedAt                 *time.Time
}

// Insights is the store's insights and review-packets part.
type Insights interface {
	// ApplyInsightFindings records one detection run in one transaction:
	// a finding updates the active insight of its rule and subject, or
	// creates one when there is none and the last closed one (dismissed or
	// converted) does not already hold all its evidence (or was resolved
	// by detection). Then every open insight of a rule in ran (the rules
	// that ran to completion) whose subject no finding names is resolved;
	// accepted and closed ones are left alone. audit, when not nil, is
	// given the result and its entry is written in the same transaction
	// (a zero entry writes none).
	ApplyInsightFindings(ctx context.Context, workspaceID string, findings []InsightFinding, ran []string, now time.Time, audit func(DetectResult) AuditEntry) (DetectResult, error)
	Insight(ctx context.Context, workspaceID, id string) (Insight, error)
	// ListInsights pages a workspace's insights in seq order; status and
	// rule filter when not empty.
	ListInsights(ctx context.Context, workspaceID, status, rule string, opts ListOptions) ([]Insight, error)
	InsightCounts(ctx context.Context, workspaceID string) ([]InsightCount, error)
	// UpdateInsight applies fn to the insight under its row lock; fn's
	// error is returned as is. Making an insight active again when another
	// of its rule and subject is active is ErrConflict.
	UpdateInsight(ctx context.Context, workspaceID, id string, fn func(*Insight) error, audit AuditEntry) (Insight, error)
	// ConvertInsight creates p from the accepted insight id and marks the
	// insight converted, atomically: ErrInsightNotAccepted otherwise.
	// build is given the insight to fill p.
	ConvertInsight(ctx context.Context, workspaceID, id string, now time.Time, build func(Insight, *ReviewPacket), audit AuditEntry) (Insight, ReviewPacket, error)

	CreateReviewPacket(ctx context.Context, p *ReviewPacket, audit AuditEntry) error
	ReviewPacket(ctx context.Context, workspaceID, id string) (ReviewPacket, error)
	ReviewPackets(ctx context.Context, workspaceID, status string, opts ListOptions) ([]ReviewPacket, error)
	ReviewPacketCounts(ctx context.Context, workspaceID string) (map[string]int64, error)
	// DecideReviewPacket applies fn to the packet under its row lock.
	DecideReviewPacket(ctx context.Context, workspaceID, id string, fn func(*ReviewPacket) error, audit AuditEntry) (ReviewPacket, error)

	InsightSignals
}

var _ Insights = (*DB)(nil)

const insightCols = `seq, id, workspace_id, rule, subject, status, title, severity, detail, evidence, occurrences, first_seen_at, last_seen_at, status_changed_by, status_changed_at, status_reason, review_packet_id, created_at, updated_at`

func scanInsight(sc scanner) (Insight, error) {
	var i Insight
	var detail, ev, first, last, c, u string
	var by, at, reason, packet sql.NullString
	if err := sc.Scan(&i.Seq, &i.ID, &i.WorkspaceID, &i.Rule, &i.Subject, &i.Status, &i.Title, &i.Severity, &detail, &ev, &i.Count,
		&first, &last, &by, &at, &reason, &packet, &c, &u); err != nil {
		return Insight{}, err
	}
	i.Detail, i.Evidence = json.RawMessage(detail), parseEvidence(ev)
	i.FirstSeenAt, i.LastSeenAt, i.CreatedAt, i.UpdatedAt = parseTS(first), parseTS(last), parseTS(c), parseTS(u)
	i.StatusChangedBy, i.StatusChangedAt, i.StatusReason, i.ReviewPacketID = by.String, nullTS(at), reason.String, packet.String
	return i, nil
}

func parseEvidence(s string) []EvidenceLink {
	out := []EvidenceLink{}
	_ = json.Unmarshal([]byte(s), &out)
	return out
}

func evidenceJSON(ev []EvidenceLink) string {
	if ev == nil {
		ev = []EvidenceLink{}
	}
	b, _ := json.Marshal(ev)
	return string(b)
}

// mergeEvidence adds the links of add not in cur, keeping the newest
// maxEvidence (the order is first seen first); it reports whether any
// was new.
func mergeEvidence(cur, add []EvidenceLink) ([]EvidenceLink, bool) {
	seen := make(map[string]bool, len(cur))
	for _, l := range cur {
		seen[l.key()] = true
	}
	out := append([]EvidenceLink(nil), cur...)
	grew := false
	for _, l := range add {
		if !seen[l.key()] {
			seen[l.key()] = true
			out = append(out, l)
			grew = true
		}
	}
	if len(out) > maxEvidence {
		out = out[len(out)-maxEvidence:]
	}
	return out, grew
}

func (s *DB) ApplyInsightFindings(ctx context.Context, workspaceID string, findings []InsightFinding, ran []string, now time.Time, audit func(DetectResult) AuditEntry) (DetectResult, error) {
	var res DetectResult
	apply := func(tx *Tx) error {
		res = DetectResult{}
		for _, f := range findings {
			if err := applyFinding(tx, workspaceID, f, now, &res); err != nil {
				return err
			}
		}
		if err := resolveCleared(tx, workspaceID, findings, ran, now, &res); err != nil {
			return err
		}
		if audit != nil {
			return insertAudit(tx, audit(res))
		}
		return nil
	}
	// Two first detections of one subject at once: on PostgreSQL the loser
	// of the unique index on active insights starts again and finds the
	// winner's insight to update.
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		if err = s.exec(ctx, apply); !isUniqueViolation(err) {
			break
		}
	}
	return res, err
}

func applyFinding(tx *Tx, workspaceID string, f InsightFinding, now time.Time, res *DetectResult) error {
	if f.Severity == "" {
		f.Severity = "warning"
	}
	if len(f.Detail) == 0 {
		f.Detail = json.RawMessage(`{}`)
	}
	last, err := scanInsight(tx.QueryRow(`SELECT `+insightCols+` FROM insights WHERE workspace_id = ? AND rule = ? AND subject = ? ORDER BY seq DESC LIMIT 1`, workspaceID, f.Rule, f.Subject))
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return fmt.Errorf("read insight: %w", err)
	case last.Active():
		ev, grew := mergeEvidence(last.Evidence, f.Evidence)
		if grew || last.Count != f.Count || last.Title != f.Title || string(last.Detail) != string(f.Detail) {
			res.Updated++
		} else {
			res.Unchanged++
		}
		if _, err := tx.Exec(`UPDATE insights SET title = ?, severity = ?, detail = ?, evidence = ?, occurrences = ?, last_seen_at = ?, updated_at = ? WHERE seq = ?`,
			f.Title, f.Severity, string(f.Detail), evidenceJSON(ev), f.Count, ts(now), ts(now), last.Seq); err != nil {
			return fmt.Errorf("update insight: %w", err)
		}
		last.Title, last.Severity, last.Detail, last.Evidence, last.Count, last.LastSeenAt, last.UpdatedAt = f.Title, f.Severity, f.Detail, ev, f.Count, now, now
		res.Insights = append(res.Insights, last)
		return nil
	case last.resolvedByDetection():
		// The condition cleared and is back: raise it again.
	default:
		// Closed: a person decided about this evidence; only new evidence
		// raises the subject again.
		if _, grew := mergeEvidence(last.Evidence, f.Evidence); !grew {
			res.Unchanged++
			return nil
		}
	}
	ev, _ := mergeEvidence(nil, f.Evidence)
	in := Insight{ID: newID(), WorkspaceID: workspaceID, Rule: f.Rule, Subject: f.Subject, Status: InsightOpen, Title: f.Title, Severity: f.Severity,
		Detail: f.Detail, Evidence: ev, Count: f.Count, FirstSeenAt: now, LastSeenAt: now, CreatedAt: now, UpdatedAt: now}
	err = tx.QueryRow(`INSERT INTO insights (id, workspace_id, rule, subject, status, title, severity, detail, evidence, occurrences, first_seen_at, last_seen_at, created_at, updated_at)
		VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?) RETURNING seq`,
		in.ID, workspaceID, in.Rule, in.Subject, in.Status, in.Title, in.Severity, string(in.Detail), evidenceJSON(ev), in.Count, ts(now), ts(now), ts(now), ts(now)).Scan(&in.Seq)
	if err != nil {
		return fmt.Errorf("create insight: %w", err)
	}
	res.Created++
	res.Insights = append(res.Insights, in)
	return nil
}

// resolveCleared dismisses, as resolved, the open insights of the rules
// in ran that no finding names. The update is conditional on the status,
// so of two detections racing to resolve one insight only one does (and
// reports it), and an insight a person accepted meanwhile stays accepted.
func resolveCleared(tx *Tx, workspaceID string, findings []InsightFinding, ran []string, now time.Time, res *DetectResult) error {
	if len(ran) == 0 {
		return nil
	}
	found := make(map[string]bool, len(findings))
	for _, f := range findings {
		found[f.Rule+"\x00"+f.Subject] = true
	}
	for _, rule := range ran {
		rows, err := tx.Query(`SELECT `+insightCols+` FROM insights WHERE workspace_id = ? AND rule = ? AND status = ? ORDER BY seq`, workspaceID, rule, InsightOpen)
		if err != nil {
			return fmt.Errorf("read open insights: %w", err)
		}
		open, err := collect(rows, scanInsight)
		if err != nil {
			return fmt.Errorf("read open insights: %w", err)
		}
		for _, in := range open {
			if found[in.Rule+"\x00"+in.Subject] {
				continue
			}
			r, err := tx.Exec(`UPDATE insights SET status = ?, status_changed_by = ?, status_changed_at = ?, status_reason = ?, updated_at = ? WHERE seq = ? AND status = ?`,
				InsightDismissed, InsightResolver, ts(now), InsightResolved, ts(now), in.Seq, InsightOpen)
			if err != nil {
				return fmt.Errorf("resolve insight: %w", err)
			}
			if n, _ := r.RowsAffected(); n == 0 {
				continue
			}
			at := now
			in.Status, in.StatusChangedBy, in.StatusChangedAt, in.StatusReason, in.UpdatedAt = InsightDismissed, InsightResolver, &at, InsightResolved, now
			res.Resolved = append(res.Resolved, in)
		}
	}
	return nil
}

func (s *DB) Insight(ctx context.Context, workspaceID, id string) (Insight, error) {
	i, err := scanInsight(s.queryRow(ctx, `SELECT `+insightCols+` FROM insights WHERE workspace_id = ? AND id = ?`, workspaceID, id))
	return i, notFound(err)
}

func (s *DB) ListInsights(ctx context.Context, workspaceID, status, rule string, opts ListOptions) ([]Insight, error) {
	return seqPage(ctx, s, "insights", `SELECT `+insightCols+` FROM insights`, workspaceID, opts, 1000, scanInsight,
		equals{"status", status}, equals{"rule", rule})
}

func (s *DB) InsightCounts(ctx context.Context, workspaceID string) ([]InsightCount, error) {
	rows, err := s.query(ctx, `SELECT rule, status, count(*) FROM insights WHERE workspace_id = ? GROUP BY rule, status ORDER BY rule, status`, workspaceID)
	if err != nil {
		return nil, fmt.Errorf("count insights: %w", err)
	}
	return collect(rows, func(sc scanner) (InsightCount, error) {
		var c InsightCount
		err := sc.Scan(&c.Rule, &c.Status, &c.N)
		return c, err
	})
}

func (s *DB) UpdateInsight(ctx context.Context, workspaceID, id string, fn func(*Insight) error, audit AuditEntry) (Insight, error) {
	var out Insight
	err := s.execLocked(ctx, func(tx *Tx) error {
		cur, err := scanInsight(tx.QueryRow(`SELECT `+insightCols+` FROM insights WHERE workspace_id = ? AND id = ?`+s.forUpdate(), workspaceID, id))
		if err != nil {
			return notFound(err)
		}
		if err := fn(&cur); err != nil {
			return err
		}
		_, err = tx.Exec(`UPDATE insights SET status = ?, status_changed_by = ?, status_changed_at = ?, status_reason = ?, updated_at = ? WHERE seq = ?`,
			cur.Status, strOrNil(cur.StatusChangedBy), tsOrNil(cur.StatusChangedAt), strOrNil(cur.StatusReason), ts(cur.UpdatedAt), cur.Seq)
		if isUniqueViolation(err) {
			return fmt.Errorf("%w: another %s insight about %s is active", ErrConflict, cur.Rule, cur.Subject)
		}
		if err != nil {
			return fmt.Errorf("update insight: %w", err)
		}
		out = cur
		return insertAudit(tx, audit)
	})
	return out, err
}

func (s *DB) ConvertInsight(ctx context.Context, workspaceID, id string, now time.Time, build func(Insight, *ReviewPacket), audit AuditEntry) (Insight, ReviewPacket, error) {
	var in Insight
	var p ReviewPacket
	err := s.execLocked(ctx, func(tx *Tx) error {
		cur, err := scanInsight(tx.QueryRow(`SELECT `+insightCols+` FROM insights WHERE workspace_id = ? AND id = ?`+s.forUpdate(), workspaceID, id))
		if err != nil {
			return notFound(err)
		}
		if cur.Status != InsightAccepted {
			return fmt.Errorf("%w (it is %s)", ErrInsightNotAccepted, cur.Status)
		}
		p = ReviewPacket{ID: newID(), WorkspaceID: workspaceID, Status: PacketPending, InsightID: cur.ID, Evidence: cur.Evidence, CreatedAt: now, UpdatedAt: now}
		build(cur, &p)
		if err := insertPacket(tx, &p); err != nil {
			return err
		}
		cur.Status, cur.ReviewPacketID, cur.UpdatedAt = InsightConverted, p.ID, now
		if _, err := tx.Exec(`UPDATE insights SET status = ?, review_packet_id = ?, updated_at = ? WHERE seq = ?`, cur.Status, p.ID, ts(now), cur.Seq); err != nil {
			return fmt.Errorf("convert insight: %w", err)
		}
		in = cur
		if audit.Target == "" {
			audit.Target = "review-packets/" + p.ID
		}
		return insertAudit(tx, audit)
	})
	return in, p, err
}

// ---- review packets ----

const packetCols = `seq, id, workspace_id, title, summary, status, insight_id, evidence, detail, created_by, created_at, decided_by, decided_at, decision_reason, updated_at`

func scanPacket(sc scanner) (ReviewPacket, error) {
	var p ReviewPacket
	var ev, detail, c, u string
	var insight, by, at, reason sql.NullString
	if err := sc.Scan(&p.Seq, &p.ID, &p.WorkspaceID, &p.Title, &p.Summary, &p.Status, &insight, &ev, &detail, &p.CreatedBy, &c, &by, &at, &reason, &u); err != nil {
		return ReviewPacket{}, err
	}
	p.InsightID, p.Evidence, p.Detail = insight.String, parseEvidence(ev), json.RawMessage(detail)
	p.CreatedAt, p.UpdatedAt, p.DecidedBy, p.DecidedAt, p.DecisionReason = parseTS(c), parseTS(u), by.String, nullTS(at), reason.String
	return p, nil
}

func insertPacket(tx *Tx, p *ReviewPacket) error {
	if p.ID == "" {
		p.ID = newID()
	}
	if p.Status == "" {
		p.Status = PacketPending
	}
	if len(p.Detail) == 0 {
		p.Detail = json.RawMessage(`{}`)
	}
	if p.Evidence == nil {
		p.Evidence = []EvidenceLink{}
	}
	err := tx.QueryRow(`INSERT INTO review_packets (id, workspace_id, title, summary, status, insight_id, evidence, detail, created_by, created_at, updated_at)
		VALUES (?,?,?,?,?,?,?,?,?,?,?) RETURNING seq`,
		p.ID, p.WorkspaceID, p.Title, p.Summary, p.Status, strOrNil(p.InsightID), evidenceJSON(p.Evidence), string(p.Detail), p.CreatedBy, ts(p.CreatedAt), ts(p.UpdatedAt)).Scan(&p.Seq)
	if isUniqueViolation(err) {
		return fmt.Errorf("%w: insight %s already has a review packet", ErrConflict, p.InsightID)
	}
	if err != nil {
		return fmt.Errorf("create review packet: %w", err)
	}
	return nil
}

func (s *DB) CreateReviewPacket(ctx context.Context, p *ReviewPacket, audit AuditEntry) error {
	return s.execSimple(ctx, func(tx *Tx) error {
		if err := insertPacket(tx, p); err != nil {
			return err
		}
		if audit.Target == "" {
			audit.Target = "review-packets/" + p.ID
		}
		return insertAudit(tx, audit)
	})
}

func (s *DB) ReviewPacket(ctx context.Context, workspaceID, id string) (ReviewPacket, error) {
	p, err := scanPacket(s.queryRow(ctx, `SELECT `+packetCols+` FROM review_packets WHERE workspace_id = ? AND id = ?`, workspaceID, id))
	return p, notFound(err)
}

func (s *DB) ReviewPackets(ctx context.Context, workspaceID, status string, opts ListOptions) ([]ReviewPacket, error) {
	return seqPage(ctx, s, "review packets", `SELECT `+packetCols+` FROM review_packets`, workspaceID, opts, 1000, scanPacket, equals{"status", status})
}

func (s *DB) ReviewPacketCounts(ctx context.Context, workspaceID string) (map[string]int64, error) {
	rows, err := s.query(ctx, `SELECT status, count(*) FROM review_packets WHERE workspace_id = ? GROUP BY status`, workspaceID)
	if err != nil {
		return nil, fmt.Errorf("count review packets: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{PacketPending: 0, PacketApproved: 0, PacketRejected: 0}
	for rows.Next() {
		var st string
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return nil, err
		}
		out[st] = n
	}
	return out, rows.Err()
}

func (s *DB) DecideReviewPacket(ctx context.Context, workspaceID, id string, fn func(*ReviewPacket) error, audit AuditEntry) (ReviewPacket, error) {
	var out ReviewPacket
	err := s.execLocked(ctx, func(tx *Tx) error {
		cur, err := scanPacket(tx.QueryRow(`SELECT `+packetCols+` FROM review_packets WHERE workspace_id = ? AND id = ?`+s.forUpdate(), workspaceID, id))
		if err != nil {
			return notFound(err)
		}
		if err := fn(&cur); err != nil {
			return err
		}
		if _, err := tx.Exec(`UPDATE review_packets SET status = ?, decided_by = ?, decided_at = ?, decision_reason = ?, updated_at = ? WHERE seq = ?`,
			cur.Status, strOrNil(cur.DecidedBy), tsOrNil(cur.DecidedAt), strOrNil(cur.DecisionReason), ts(cur.UpdatedAt), cur.Seq); err != nil {
			return fmt.Errorf("decide review packet: %w", err)
		}
		out = cur
		return insertAudit(tx, audit)
	})
	return out, err
}
