package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"reeve.dev/reeve/server/sdk"
)

// The insights page (spec 3.5, 4.9): what the detection rules found, the
// summary, and the review packets made from accepted insights. Like the
// team page it is server-rendered over the insight and review-packet
// routes, as the signed-in person: members read, and the buttons that
// change anything are shown to owners and admins, whom the routes admit;
// a forged form from anyone else is refused by the route itself.

type insightView struct {
	sdk.Insight
	Detail   string // indented JSON, for people
	Evidence []evidenceView
}

// evidenceView is an evidence link as the page shows it: a machine by its
// name, linked to its page, and a session the person may view by its
// title, linked to its live page; anything else by kind and id.
type evidenceView struct {
	sdk.EvidenceLink
	Label, Href string
}

type insightsPage struct {
	page
	Workspace sdk.Workspace
	Admin     bool
	// Filter is the status shown ("" for all); Statuses the choices.
	Filter    string
	Statuses  []string
	Insights  []insightView
	NextAfter int64
	Summary   *sdk.InsightSummary
	Rules     []string
	Packets   []sdk.ReviewPacket
}

// insightStatuses are the statuses the list filters by, in the order shown.
var insightStatuses = []string{sdk.InsightOpen, sdk.InsightAccepted, sdk.InsightDismissed, sdk.InsightConverted}

func (h *Handler) insightsPage(w http.ResponseWriter, r *http.Request) {
	s, tp, ok := h.workspaceFor(w, r)
	if !ok {
		return
	}
	p := insightsPage{page: tp.page, Workspace: tp.Workspace, Admin: tp.Admin}
	h.takeFlash(w, r, s).apply(&p.page)
	h.renderInsights(w, r, s, p)
}

func (h *Handler) renderInsights(w http.ResponseWriter, r *http.Request, s string, p insightsPage) {
	c := h.client(r, s)
	base := "/api/resources/" + url.PathEscape(p.Workspace.ID)
	p.Title = "Insights · " + p.Workspace.Name
	p.Statuses = insightStatuses
	p.Rules = sdk.InsightRules
	q := r.URL.Query()
	if f := q.Get("status"); slices.Contains(p.Statuses, f) {
		p.Filter = f
	}
	list := url.Values{"limit": {"100"}}
	if p.Filter != "" {
		list.Set("status", p.Filter)
	}
	if a := q.Get("after"); a != "" {
		list.Set("after", a)
	}
	var ins sdk.InsightCollectionResponse
	if _, err := c.Do(r.Context(), http.MethodGet, base+"/insights?"+list.Encode(), nil, &ins); err != nil {
		p.Error = joinErr(p.Error, "The insights could not be listed: "+apiMessage(err))
	}
	label := h.evidenceLabeler(r, c, p.Workspace.ID, ins.Data)
	who := actorNames(r, c, p.Workspace.ID)
	for _, i := range ins.Data {
		i.StatusChangedBy = who(i.StatusChangedBy)
		v := insightView{Insight: i, Detail: indentJSON(i.Detail)}
		for _, l := range i.Evidence {
			v.Evidence = append(v.Evidence, label(l))
		}
		p.Insights = append(p.Insights, v)
	}
	p.NextAfter = ins.Meta.NextAfter
	var sum sdk.InsightSummaryResponse
	if _, err := c.Do(r.Context(), http.MethodGet, base+"/insights/summary", nil, &sum); err != nil {
		p.Error = joinErr(p.Error, "The summary could not be read: "+apiMessage(err))
	} else {
		p.Summary = &sum.Data
	}
	var packets sdk.ReviewPacketCollectionResponse
	if _, err := c.Do(r.Context(), http.MethodGet, base+"/review-packets?limit=50", nil, &packets); err != nil {
		p.Error = joinErr(p.Error, "The review packets could not be listed: "+apiMessage(err))
	}
	// Newest first: the one a person just made is at the top.
	for i := len(packets.Data) - 1; i >= 0; i-- {
		pk := packets.Data[i]
		pk.CreatedBy, pk.DecidedBy = who(pk.CreatedBy), who(pk.DecidedBy)
		p.Packets = append(p.Packets, pk)
	}
	h.render(w, r, http.StatusOK, "insights.html", p)
}

// insightsAction handles the page's forms: detect, a status change,
// convert, and a review packet's decision. It answers with a redirect to
// the page as it was filtered (see flash.go), so a reload never runs
// detection or a decision again.
func (h *Handler) insightsAction(w http.ResponseWriter, r *http.Request) {
	s, tp, ok := h.workspaceFor(w, r)
	if !ok || !h.checkPost(w, r, s) {
		return
	}
	c := h.client(r, s)
	ws := tp.Workspace.ID
	base := "/api/resources/" + url.PathEscape(ws)
	f := r.PostFormValue
	var (
		fl  flash
		err error
	)
	switch f("action") {
	case "detect":
		var out sdk.InsightCollectionResponse
		_, err = c.Do(r.Context(), http.MethodPost, base+"/insights/detect", nil, &out)
		if err == nil {
			n := func(p *int) int {
				if p == nil {
					return 0
				}
				return *p
			}
			fl.Notice = fmt.Sprintf("Detection ran: %d new, %d updated, %d unchanged, %d resolved.", n(out.Meta.Created), n(out.Meta.Updated), n(out.Meta.Unchanged), n(out.Meta.Resolved))
		}
	case "status":
		req := sdk.InsightUpdateRequest{Status: f("status")}
		if reason := strings.TrimSpace(f("reason")); reason != "" {
			req.Reason = &reason
		}
		var out sdk.InsightResponse
		_, err = c.Do(r.Context(), http.MethodPatch, base+"/insights/"+url.PathEscape(f("insight")), req, &out)
		if err == nil {
			fl.Notice = "Insight “" + out.Data.Title + "” is now " + out.Data.Status + "."
		}
	case "convert":
		var out sdk.ReviewPacketResponse
		_, err = c.Do(r.Context(), http.MethodPost, base+"/insights/"+url.PathEscape(f("insight"))+"/convert", nil, &out)
		if err == nil {
			fl.Notice = "Converted into the review packet “" + out.Data.Title + "”, waiting for a decision below."
		}
	case "decide-packet":
		req := sdk.ReviewPacketDecisionRequest{Decision: f("decision")}
		if reason := strings.TrimSpace(f("reason")); reason != "" {
			req.Reason = &reason
		}
		var out sdk.ReviewPacketResponse
		_, err = c.Do(r.Context(), http.MethodPatch, base+"/review-packets/"+url.PathEscape(f("packet"))+"/decision", req, &out)
		if err == nil {
			fl.Notice = "Review packet “" + out.Data.Title + "” " + out.Data.Status + "."
		}
	default:
		fl.Error = "Unknown action."
	}
	if err != nil {
		fl.Notice = ""
		fl.Error = "Refused: " + apiMessage(err)
	}
	// Back to the list the form was on: its filter and page, and nothing
	// else from the address.
	back := url.Values{}
	q := r.URL.Query()
	if st := q.Get("status"); slices.Contains(insightStatuses, st) {
		back.Set("status", st)
	}
	if after, perr := strconv.ParseInt(q.Get("after"), 10, 64); perr == nil && after > 0 {
		back.Set("after", strconv.FormatInt(after, 10))
	}
	target := "/w/" + url.PathEscape(ws) + "/insights"
	if len(back) > 0 {
		target += "?" + back.Encode()
	}
	h.redirectWith(w, r, s, target, fl)
}

// evidenceLabeler names the machines and sessions the insights point at,
// reading the installs and sessions lists once each (as the person: a
// session they may not view stays a bare id), and only when some
// evidence names one.
func (h *Handler) evidenceLabeler(r *http.Request, c *sdk.Client, ws string, list []sdk.Insight) func(sdk.EvidenceLink) evidenceView {
	kinds := map[string]bool{}
	for _, i := range list {
		for _, l := range i.Evidence {
			kinds[l.Kind] = true
		}
	}
	machines := map[string]string{}
	if kinds["install"] {
		if ins, err := c.ListInstalls(r.Context(), ws); err == nil {
			for _, in := range ins {
				machines[in.ID] = in.Name
			}
		}
	}
	type sess struct{ title, href string }
	sessions := map[string]sess{}
	if kinds["session"] {
		if recs, err := c.ListRecords(r.Context(), "/api/resources/"+url.PathEscape(ws)+"/sessions?limit=500"); err == nil {
			for _, rec := range recs {
				a := rec.Attributes
				v := sess{title: str(a, "title")}
				if in, sid := str(a, "install_id"), str(a, "daemon_session_id"); in != "" && sid != "" {
					v.href = "/w/" + url.PathEscape(ws) + "/m/" + url.PathEscape(in) + "/s/" + url.PathEscape(sid)
				}
				sessions[rec.ID] = v
			}
		}
	}
	return func(l sdk.EvidenceLink) evidenceView {
		v := evidenceView{EvidenceLink: l}
		switch l.Kind {
		case "install":
			if name, ok := machines[l.ID]; ok {
				v.Label, v.Href = name, "/w/"+url.PathEscape(ws)+"/m/"+url.PathEscape(l.ID)
			}
		case "session":
			if ss, ok := sessions[l.ID]; ok {
				v.Label, v.Href = ss.title, ss.href
			}
		}
		return v
	}
}

// actorNames shows a "user:ID" actor as the member's email; other actors
// (system:insights, a machine) as they are.
func actorNames(r *http.Request, c *sdk.Client, ws string) func(string) string {
	names := map[string]string{}
	if ms, err := c.ListMembers(r.Context(), ws); err == nil {
		for _, m := range ms {
			names["user:"+strconv.FormatInt(m.UserID, 10)] = m.Email
		}
	}
	return func(actor string) string {
		if n, ok := names[actor]; ok {
			return n
		}
		return actor
	}
}

func joinErr(have, more string) string {
	if have == "" {
		return more
	}
	return have + " " + more
}

func indentJSON(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" || string(raw) == "{}" {
		return ""
	}
	var b bytes.Buffer
	if json.Indent(&b, raw, "", "  ") != nil {
		return string(raw)
	}
	return b.String()
}
