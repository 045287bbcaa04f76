package api

import (
	"errors"
	"net/http"
	"slices"
	"strings"

	"reeve.dev/reeve/server/auth"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// Insights (spec 3.5, 4.9; docs/insights.md). Detection rules
// (insights_rules.go) run over the workspace's records and keep one
// active insight per rule and subject; people move an insight through
// its statuses, and convert an accepted one into a review packet
// (reviewpackets.go). Members read; owners and admins change.

func insightRoutes() []Route {
	ri := "/api/resources/{workspace}/insights"
	const tag = "Insights"
	return []Route{
		typed("GET", ri, "getResourceInsights", tag, 200, "InsightCollectionResponse").
			query(qStr("status", "open, accepted, dismissed or converted"), qStr("rule", "one of the detection rules"), qInt("after", "insights after this seq"), qInt("limit", "at most this many (1 to 1000)")).
			summary("List the workspace's insights in the order they were first raised"),
		typed("PATCH", ri+"/{insight}", "updateResourceInsight", tag, 200, "InsightResponse").body("InsightUpdateRequest", true).role("admin").errs(404, 409).
			summary("Change an insight's status: open → accepted or dismissed; accepted → open or dismissed; dismissed → open. 409 for any other change, and for a converted insight"),
		typed("POST", ri+"/{insight}/convert", "convertResourceInsight", tag, 201, "ReviewPacketResponse").success(200, 201).role("admin").errs(404, 409).
			summary("Convert an accepted insight into a review packet carrying its evidence (201); 409 unless the insight is accepted"),
		typed("POST", ri+"/detect", "detectResourceInsights", tag, 201, "InsightCollectionResponse").success(200, 201).role("admin").
			summary("Run the detection rules now: 201 when an insight was raised, else 200; the active insights the rules found, with what changed in meta (open insights whose condition cleared are resolved: dismissed by system:insights, reason resolved). Audited"),
		typed("GET", ri+"/summary", "getResourceInsightsSummary", tag, 200, "InsightSummaryResponse").
			summary("Insights by rule and status, review packets by status, and (owners and admins) the ledger's current period against the hard cap"),
	}
}

func (s *Server) insightHandlers() map[string]handlerFunc {
	return map[string]handlerFunc{
		"getResourceInsights":        s.listInsights,
		"updateResourceInsight":      s.updateInsight,
		"convertResourceInsight":     s.convertInsight,
		"detectResourceInsights":     s.detectInsightsNow,
		"getResourceInsightsSummary": s.insightSummary,
		"listResourceReviewPackets":  s.listReviewPackets,
		"createResourceReviewPacket": s.createReviewPacket,
		"getResourceReviewPacket":    s.getReviewPacket,
		"decideResourceReviewPacket": s.decideReviewPacket,
		"exportResourceReviewPacket": s.exportReviewPacket,
	}
}

func (s *Server) insightStore() (store.Insights, error) {
	st, ok := s.st.(store.Insights)
	if !ok {
		return nil, errorf(http.StatusNotImplemented, "not_implemented", "this server's store does not keep insights")
	}
	return st, nil
}

var insightStatuses = []string{sdk.InsightOpen, sdk.InsightAccepted, sdk.InsightDismissed, sdk.InsightConverted}

// insightTransitions are the status changes PATCH allows; converted is
// reached only through convert, and left never.
var insightTransitions = map[string][]string{
	sdk.InsightOpen:      {sdk.InsightAccepted, sdk.InsightDismissed},
	sdk.InsightAccepted:  {sdk.InsightOpen, sdk.InsightDismissed},
	sdk.InsightDismissed: {sdk.InsightOpen},
}

func evidenceOut(ev []store.EvidenceLink) []sdk.EvidenceLink {
	out := make([]sdk.EvidenceLink, 0, len(ev))
	for _, l := range ev {
		out = append(out, sdk.EvidenceLink{Kind: l.Kind, ID: l.ID, Note: l.Note, At: l.At})
	}
	return out
}

func insightOut(i store.Insight) sdk.Insight {
	return sdk.Insight{ID: i.ID, WorkspaceID: i.WorkspaceID, Rule: i.Rule, Subject: i.Subject, Status: i.Status, Title: i.Title, Severity: i.Severity,
		Detail: i.Detail, Evidence: evidenceOut(i.Evidence), Count: i.Count, FirstSeenAt: i.FirstSeenAt, LastSeenAt: i.LastSeenAt,
		StatusChangedBy: i.StatusChangedBy, StatusChangedAt: i.StatusChangedAt, StatusReason: i.StatusReason, ReviewPacketID: i.ReviewPacketID,
		Seq: i.Seq, CreatedAt: i.CreatedAt, UpdatedAt: i.UpdatedAt}
}

func (s *Server) listInsights(c *call) (int, any, error) {
	st, err := s.insightStore()
	if err != nil {
		return 0, nil, err
	}
	status, rule := c.r.URL.Query().Get("status"), c.r.URL.Query().Get("rule")
	if status != "" && !slices.Contains(insightStatuses, status) {
		return 0, nil, invalid(sdk.ErrorDetail{Field: "query:status", Message: "status is one of " + strings.Join(insightStatuses, ", ")})
	}
	if rule != "" && !slices.Contains(sdk.InsightRules, rule) {
		return 0, nil, invalid(sdk.ErrorDetail{Field: "query:rule", Message: "rule is one of " + strings.Join(sdk.InsightRules, ", ")})
	}
	limit := int(min(queryInt(c, "limit", 100), 1000))
	list, err := st.ListInsights(c.ctx(), c.ws.ID, status, rule, store.ListOptions{After: queryInt(c, "after", 0), Limit: limit})
	if err != nil {
		return 0, nil, err
	}
	out := sdk.InsightCollectionResponse{Data: make([]sdk.Insight, 0, len(list))}
	for _, i := range list {
		out.Data = append(out.Data, insightOut(i))
	}
	out.Meta.Count = len(out.Data)
	if len(list) == limit {
		out.Meta.NextAfter = list[len(list)-1].Seq
	}
	return 200, out, nil
}

func (s *Server) updateInsight(c *call) (int, any, error) {
	st, err := s.insightStore()
	if err != nil {
		return 0, nil, err
	}
	var req sdk.InsightUpdateRequest
	if err := c.decode(&req); err != nil {
		return 0, nil, err
	}
	id, now := c.r.PathValue("insight"), c.now()
	in, err := st.UpdateInsight(c.ctx(), c.ws.ID, id, func(i *store.Insight) error {
		if !slices.Contains(insightTransitions[i.Status], req.Status) {
			return errorf(http.StatusConflict, sdk.CodeInvalidTransition, "an insight that is %s cannot become %s", i.Status, req.Status)
		}
		i.Status, i.StatusChangedBy, i.StatusChangedAt, i.UpdatedAt = req.Status, c.p.Actor(), &now, now
		i.StatusReason = ""
		if req.Reason != nil {
			i.StatusReason = *req.Reason
		}
		return nil
	}, c.audit("insight.update", "insights/"+id, map[string]any{"status": req.Status}))
	if err != nil {
		return 0, nil, insightError(err, "insight", id)
	}
	return 200, sdk.InsightResponse{Data: insightOut(in)}, nil
}

// insightError maps the store's answers to statuses.
func insightError(err error, what, id string) error {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, store.ErrNotFound):
		return notFound("no %s %q", what, id)
	case errors.Is(err, store.ErrConflict):
		return errorf(http.StatusConflict, sdk.CodeInvalidTransition, "%s", strings.TrimPrefix(err.Error(), store.ErrConflict.Error()+": "))
	}
	return err
}

func (s *Server) convertInsight(c *call) (int, any, error) {
	st, err := s.insightStore()
	if err != nil {
		return 0, nil, err
	}
	id, now := c.r.PathValue("insight"), c.now()
	_, p, err := st.ConvertInsight(c.ctx(), c.ws.ID, id, now, func(i store.Insight, p *store.ReviewPacket) {
		p.Title = "Review: " + i.Title
		p.Summary = "Converted from the " + i.Rule + " insight about " + i.Subject + "."
		p.Detail, p.CreatedBy = i.Detail, c.p.Actor()
	}, c.audit("insight.convert", "", map[string]any{"insight_id": id}))
	if err != nil {
		return 0, nil, insightError(err, "insight", id)
	}
	return 201, sdk.ReviewPacketResponse{Data: packetOut(p)}, nil
}

func (s *Server) detectInsightsNow(c *call) (int, any, error) {
	st, err := s.insightStore()
	if err != nil {
		return 0, nil, err
	}
	res, err := s.detectInsights(c.ctx(), st, *c.ws, c.p.Actor(), true)
	if err != nil {
		return 0, nil, err
	}
	out := sdk.InsightCollectionResponse{Data: make([]sdk.Insight, 0, len(res.Insights))}
	for _, i := range res.Insights {
		out.Data = append(out.Data, insightOut(i))
	}
	out.Meta.Count = len(out.Data)
	resolved := len(res.Resolved)
	out.Meta.Created, out.Meta.Updated, out.Meta.Unchanged, out.Meta.Resolved = &res.Created, &res.Updated, &res.Unchanged, &resolved
	status := 200
	if res.Created > 0 {
		status = 201
	}
	return status, out, nil
}

func (s *Server) insightSummary(c *call) (int, any, error) {
	st, err := s.insightStore()
	if err != nil {
		return 0, nil, err
	}
	counts, err := st.InsightCounts(c.ctx(), c.ws.ID)
	if err != nil {
		return 0, nil, err
	}
	sum := sdk.InsightSummary{ByStatus: map[string]int64{}, ByRule: map[string]map[string]int64{}}
	for _, st := range insightStatuses {
		sum.ByStatus[st] = 0
	}
	for _, r := range sdk.InsightRules {
		sum.ByRule[r] = map[string]int64{}
	}
	for _, n := range counts {
		sum.Total += n.N
		sum.ByStatus[n.Status] += n.N
		if sum.ByRule[n.Rule] == nil {
			sum.ByRule[n.Rule] = map[string]int64{}
		}
		sum.ByRule[n.Rule][n.Status] = n.N
	}
	if sum.ReviewPackets, err = st.ReviewPacketCounts(c.ctx(), c.ws.ID); err != nil {
		return 0, nil, err
	}
	// The ledger is an owner's and admin's to read (as its own routes).
	if auth.RoleRank(c.role) >= auth.RoleRank("admin") {
		if sum.Ledger, err = s.ledgerSummary(c); err != nil {
			return 0, nil, err
		}
	}
	return 200, sdk.InsightSummaryResponse{Data: sum}, nil
}

// ledgerSummary is the current period against the cap and the last
// periods' totals.
func (s *Server) ledgerSummary(c *call) (*sdk.LedgerSummary, error) {
	ws, err := s.st.Workspace(c.ctx(), c.ws.ID)
	if err != nil {
		return nil, err
	}
	pol, _ := store.ParseBudgetPolicy(ws.BudgetPolicy) // a broken policy reads as no cap here; admission refuses it
	period := store.PeriodKey(pol.Period, c.now())
	cur, err := s.st.LedgerPeriod(c.ctx(), c.ws.ID, period)
	if err != nil {
		return nil, err
	}
	l := &sdk.LedgerSummary{Period: period, SpentUSD: cur.Total.String(), Entries: cur.Entries, WarnAtFraction: warnFraction(pol), Periods: []sdk.LedgerPeriodTotal{}}
	if pol.HardCap != nil {
		c, r := pol.HardCap.String(), max(*pol.HardCap-cur.Total, 0).String()
		l.HardCapUSD, l.RemainingUSD = &c, &r
		if *pol.HardCap > 0 {
			f := float64(cur.Total) / float64(*pol.HardCap)
			l.FractionUsed = &f
		}
	}
	periods, err := s.st.LedgerPeriods(c.ctx(), c.ws.ID)
	if err != nil {
		return nil, err
	}
	for i, p := range periods {
		if i == 12 {
			break
		}
		l.Periods = append(l.Periods, sdk.LedgerPeriodTotal{Period: p.Period, TotalUSD: p.Total.String(), Entries: p.Entries})
	}
	return l, nil
}
