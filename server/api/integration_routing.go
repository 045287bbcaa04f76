package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/template"

	"go.yaml.in/yaml/v3"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// Routing an integration event: the workspace's routes are the
// .reeve/routes/*.yaml files of its team resource bundles (what `reeve
// team-resource sync` distributes and `reeve check` validates, routes.v1
// in docs/governance.md). A route whose trigger and labels match the event
// turns it into work: a workflow run of the route's agent with its prompt
// template filled from the event.

// triggerOf maps an event to the routes.v1 trigger it fires, and whether
// its action is one that starts work (an edit or a close does not).
func triggerOf(ev sdk.IntegrationEvent) string {
	switch ev.Provider {
	case sdk.ProviderCodeHost:
		switch {
		case ev.Kind == "issues" && slices.Contains([]string{"opened", "reopened", "labeled"}, ev.Action):
			return "issue"
		case ev.Kind == "pull_request" && slices.Contains([]string{"opened", "reopened", "labeled", "ready_for_review"}, ev.Action):
			return "pull_request"
		case ev.Kind == "issue_comment" && ev.Action == "created":
			return "comment"
		}
	case sdk.ProviderTracker:
		if ev.Kind == "issue.created" || ev.Kind == "issue.updated" {
			return "issue"
		}
		if ev.Kind == "comment.created" {
			return "comment"
		}
	case sdk.ProviderChat:
		if ev.Kind == "message" || ev.Kind == "app_mention" {
			return "comment"
		}
	}
	return ""
}

// routeDef is one route of a routes.v1 file, as much as routing needs.
type routeDef struct {
	Name string `yaml:"name"`
	On   struct {
		Trigger string   `yaml:"trigger"`
		Labels  []string `yaml:"labels"`
	} `yaml:"on"`
	Agent          string `yaml:"agent"`
	Model          string `yaml:"model"`
	Prompt         string `yaml:"prompt"`
	PromptFile     string `yaml:"prompt_file"`
	Mode           string `yaml:"mode"`
	TimeoutSeconds int    `yaml:"timeout_seconds"`

	resource, version, file string
	files                   map[string][]byte
}

// routeNameRE is compiled on first use: a package-level regexp is built at
// every start of the binary, every command and the daemon included.
var routeNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`) })

// loadRoutes reads every route of the workspace's bundles. A file that
// does not parse is reported and skipped: one bad file must not stop the
// others from routing.
func (s *Server) loadRoutes(ctx context.Context, ws string) ([]routeDef, []string, error) {
	var routes []routeDef
	var problems []string
	var after int64
	for {
		recs, err := s.st.Records(ctx, ws, teamResourceCollection, store.ListOptions{After: after, Limit: 100})
		if err != nil {
			return nil, nil, err
		}
		for _, r := range recs {
			var b sdk.TeamResourceBundle
			if err := json.Unmarshal(r.Attributes, &b); err != nil {
				problems = append(problems, fmt.Sprintf("team resource %s: %v", r.NaturalKey, err))
				continue
			}
			files := map[string][]byte{}
			for _, f := range b.Files {
				if data, err := base64.StdEncoding.DecodeString(f.ContentBase64); err == nil {
					files[f.Path] = data
				}
			}
			names := make([]string, 0, len(files))
			for p := range files {
				if ok, _ := path.Match(".reeve/routes/*.yaml", p); ok {
					names = append(names, p)
				}
			}
			sort.Strings(names)
			for _, p := range names {
				var doc struct {
					Version int        `yaml:"version"`
					Routes  []routeDef `yaml:"routes"`
				}
				if err := yaml.Unmarshal(files[p], &doc); err != nil || doc.Version != 1 {
					problems = append(problems, fmt.Sprintf("%s@%s %s: not a routes v1 file", b.Resource, b.Version, p))
					continue
				}
				for _, rd := range doc.Routes {
					if !routeNameRE().MatchString(rd.Name) || rd.Agent == "" || rd.On.Trigger == "" || (rd.Prompt == "") == (rd.PromptFile == "") {
						problems = append(problems, fmt.Sprintf("%s@%s %s: route %q is not valid (reeve check shows why)", b.Resource, b.Version, p, rd.Name))
						continue
					}
					rd.resource, rd.version, rd.file, rd.files = b.Resource, b.Version, p, files
					routes = append(routes, rd)
				}
			}
		}
		if len(recs) < 100 {
			return routes, problems, nil
		}
		after = recs[len(recs)-1].Seq
	}
}

// matches reports whether rd fires for ev (already mapped to trigger). A
// "labeled" action fires only routes that ask for the label just added, so
// adding an unrelated label to an issue does not start the work again.
func (rd routeDef) matches(ev sdk.IntegrationEvent, trigger string) bool {
	if rd.On.Trigger != trigger {
		return false
	}
	for _, l := range rd.On.Labels {
		if !slices.Contains(ev.Subject.Labels, l) {
			return false
		}
	}
	if ev.Action == "labeled" {
		return slices.Contains(rd.On.Labels, ev.Subject.AddedLabel)
	}
	return true
}

func (rd routeDef) prompt(ev sdk.IntegrationEvent) (string, error) {
	text := rd.Prompt
	if rd.PromptFile != "" {
		data, ok := rd.files[path.Join(".reeve", rd.PromptFile)]
		if !ok {
			return "", fmt.Errorf("prompt_file %s is not in the bundle", rd.PromptFile)
		}
		text = string(data)
	}
	t, err := template.New(rd.Name).Option("missingkey=error").Parse(text)
	if err != nil {
		return "", fmt.Errorf("prompt template: %w", err)
	}
	var b strings.Builder
	err = t.Execute(&b, map[string]string{"Title": ev.Subject.Title, "Body": ev.Subject.Body, "URL": ev.Subject.URL, "Labels": strings.Join(ev.Subject.Labels, ", ")})
	if err != nil {
		return "", fmt.Errorf("prompt template: %w", err)
	}
	return b.String(), nil
}

// routeEvent evaluates the event against the current routes, creates the
// work of each new match, and writes the routing onto the event. A route
// that already created work for this event is not run again.
func (s *Server) routeEvent(c *call, ws, eventID string) (sdk.Routing, error) {
	ctx := c.ctx()
	rec, err := s.st.Record(ctx, ws, integrationEventCollection, eventID)
	if err != nil {
		return sdk.Routing{}, err
	}
	ev, err := decodeEvent(rec)
	if err != nil {
		return sdk.Routing{}, err
	}
	prev := ev.Routing
	done := map[string]sdk.RouteMatch{}
	for _, m := range prev.Matched {
		if m.Error == "" && m.WorkflowRunID != "" {
			done[m.Route] = m
		}
	}
	routing := sdk.Routing{EvaluatedAt: c.now(), Attempt: prev.Attempt + 1, Trigger: triggerOf(ev), Matched: []sdk.RouteMatch{}}
	if prev.Attempt > 0 {
		var names []string
		for _, m := range prev.Matched {
			names = append(names, m.Route)
		}
		routing.History = append(prev.History, sdk.RoutingBrief{EvaluatedAt: prev.EvaluatedAt, Attempt: prev.Attempt, Matched: names})
	}
	if routing.Trigger != "" {
		routes, problems, err := s.loadRoutes(ctx, ws)
		if err != nil {
			return sdk.Routing{}, err
		}
		routing.Errors = problems
		for _, rd := range routes {
			if !rd.matches(ev, routing.Trigger) {
				continue
			}
			if m, ok := done[rd.Name]; ok {
				routing.Matched = append(routing.Matched, m)
				continue
			}
			routing.Matched = append(routing.Matched, s.createWork(c, ws, ev, rd))
		}
	}
	var emit []store.OutboundEvent
	if len(routing.Matched) > 0 {
		emit = []store.OutboundEvent{{Kind: sdk.EventIntegrationRouted, Data: map[string]any{"integration_event_id": ev.ID, "kind": ev.Kind, "provider": ev.Provider, "matched": routing.Matched}}}
	}
	// The caller is who routes: the delivery's webhook, or the member who
	// recorded the event or retried its routing.
	audit := c.audit("integration_event.route", eventID, map[string]any{"attempt": routing.Attempt, "matched": len(routing.Matched)})
	audit.WorkspaceID, audit.Emit = ws, emit
	_, err = s.st.UpdateRecordIf(ctx, ws, integrationEventCollection, eventID, func(r *store.Record) error {
		var attrs map[string]any
		if err := json.Unmarshal(r.Attributes, &attrs); err != nil {
			return err
		}
		attrs["routing"] = routing
		b, err := json.Marshal(attrs)
		if err != nil {
			return err
		}
		r.Attributes, r.UpdatedAt = b, c.now()
		return nil
	}, audit)
	if len(emit) > 0 && s.hooks != nil {
		s.hooks.Notify()
	}
	return routing, err
}

func (s *Server) createWork(c *call, ws string, ev sdk.IntegrationEvent, rd routeDef) sdk.RouteMatch {
	m := sdk.RouteMatch{Route: rd.Name, Resource: rd.resource, Version: rd.version, File: rd.file, Agent: rd.Agent, Model: rd.Model}
	prompt, err := rd.prompt(ev)
	if err != nil {
		m.Status, m.Error = "failed", err.Error()
		return m
	}
	m.Prompt = prompt
	req := sdk.WorkflowRunCreateRequest{Agent: rd.Agent, Model: rd.Model, Prompt: prompt, Repo: ev.Subject.Repo, Status: sdk.RunQueued}
	m.Created = "workflow_run"
	run, err := s.queueRun(c, ws, ev, req)
	if err != nil {
		// Not runnable now (no executor offers the agent, say): the match
		// says why, and retry-routing tries again.
		m.Status, m.Error = "failed", err.Error()
		var ae *apiError
		if errors.As(err, &ae) && len(ae.Details) > 0 {
			m.Error = ae.Message + ": " + ae.Details[0].Message
		}
		return m
	}
	m.WorkflowRunID, m.Status = run.ID, run.Status
	return m
}

// queueRun creates the run through the workflow runs' own path (the same
// checks, budget admission and audit as POST /api/workflow-runs), in the
// event's workspace: an ingestion request has no workspace of its own.
func (s *Server) queueRun(c *call, ws string, ev sdk.IntegrationEvent, req sdk.WorkflowRunCreateRequest) (sdk.WorkflowRun, error) {
	w, err := s.st.Workspace(c.ctx(), ws)
	if err != nil {
		return sdk.WorkflowRun{}, err
	}
	cc := *c
	cc.ws, cc.body = &w, map[string]any{"integration_event_id": ev.ID}
	_, body, err := s.newRun(&cc, req, "", sdk.RunQueued)
	if err != nil {
		return sdk.WorkflowRun{}, err
	}
	resp, ok := body.(sdk.WorkflowRunResponse)
	if !ok {
		return sdk.WorkflowRun{}, fmt.Errorf("queue run: unexpected answer %T", body)
	}
	return resp.Data, nil
}
