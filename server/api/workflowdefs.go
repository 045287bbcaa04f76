package api

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"

	"reeve.dev/reeve/server/auth"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// Stored workflow definitions (docs/workers.md): the service's own route
// group. A definition is a named workflow YAML of a workspace; every
// change adds an immutable, numbered version, so a run that names a
// version (or the latest one at its creation) runs exactly that YAML, and
// its digest proves which.

func workflowDefinitionRoutes() []Route {
	const tag = "Workflow Definitions"
	b := "/api/resources/{workspace}/workflow-definitions"
	it := b + "/{workflowDefinition}"
	return []Route{
		typed("GET", b, "listWorkflowDefinitions", tag, 200, "WorkflowDefinitionCollectionResponse").
			summary("The workspace's workflow definitions by name, each with its latest version's id, number and digest"),
		typed("POST", b, "createWorkflowDefinition", tag, 201, "WorkflowDefinitionResponse").body("WorkflowDefinitionCreateRequest", true).errs(409, 422).
			errBody(422, "WorkflowDefinitionInvalidResponse").
			summary("Store a workflow definition with its first version; its YAML is validated (422 definition_invalid with every issue), 409 when the name is taken"),
		typed("GET", it, "getWorkflowDefinition", tag, 200, "WorkflowDefinitionResponse").errs(404).
			summary("One definition: its latest version's YAML and digest, and every version (without YAML)"),
		typed("POST", it+"/versions", "createWorkflowDefinitionVersion", tag, 201, "WorkflowDefinitionVersionResponse").success(200, 201).
			body("WorkflowDefinitionVersionCreateRequest", true).errs(404, 422).errBody(422, "WorkflowDefinitionInvalidResponse").
			summary("Add a version (validated like a new definition); the YAML of the latest version again answers 200 with that version"),
		typed("GET", it+"/versions/{workflowVersion}", "getWorkflowDefinitionVersion", tag, 200, "WorkflowDefinitionVersionResponse").errs(404).
			summary("One version with its YAML"),
		// Any member reaches the route, as for creating one; the handler
		// then lets only the definition's creator or a workspace admin
		// delete it: a definition is the workspace's shared recipe, which
		// one member must not take from the others.
		typed("DELETE", it, "deleteWorkflowDefinition", tag, 200, "WorkflowDefinitionResponse").errs(403, 404, 409).
			summary("Delete a definition with all its versions, answering what was deleted; only its creator or a workspace owner or admin may (403 otherwise); 409 while a run that has not finished (draft, queued, blocked, leased, running, waiting-approval) names it. Finished runs keep the YAML and digest they ran. Audited"),
		// Beside the spec's POST (the decision): the node a worker raised,
		// where an approver reads what they are asked before deciding.
		typed("GET", "/api/workflow-runs/{workflowRun}/approvals/{nodeKey}", "getWorkflowRunApproval", "Workflow Runs", 200, "WorkflowApprovalResponse").errs(404).
			summary("One approval node of a run: the tool, its input and summary, its state and deadline"),
	}
}

func (s *Server) workflowDefinitionHandlers() map[string]handlerFunc {
	return map[string]handlerFunc{
		"listWorkflowDefinitions":         s.listDefinitions,
		"createWorkflowDefinition":        s.createDefinition,
		"getWorkflowDefinition":           s.getDefinition,
		"createWorkflowDefinitionVersion": s.addDefinitionVersion,
		"getWorkflowDefinitionVersion":    s.getDefinitionVersion,
		"deleteWorkflowDefinition":        s.deleteDefinition,
		"getWorkflowRunApproval":          s.getRunApproval,
	}
}

func (s *Server) getRunApproval(c *call) (int, any, error) {
	_, aps, err := c.loadRun()
	if err != nil {
		return 0, nil, err
	}
	node := c.r.PathValue("nodeKey")
	for _, a := range aps {
		if a.NodeKey == node {
			return 200, sdk.WorkflowApprovalResponse{Data: approvalOut(a, c.now())}, nil
		}
	}
	return 0, nil, notFound("no approval node %q on this run", node)
}

func (c *call) defStore() (store.WorkflowDefinitions, error) {
	if d, ok := c.s.st.(store.WorkflowDefinitions); ok {
		return d, nil
	}
	return nil, errorf(http.StatusNotImplemented, "not_implemented", "this server's store does not keep workflow definitions")
}

// workflowDigest names a YAML's content: what a run ran, whatever the
// definition became since.
func workflowDigest(yaml string) string {
	sum := sha256.Sum256([]byte(yaml))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// runnerPoolName is compiled on first use: a counted repetition costs over a
// thousand allocations, which package init would charge every command.
var runnerPoolName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`) })

// checkWorkflowYAML validates a workflow YAML as a definition: it parses,
// with known keys only, and its fields are in range. Every problem is an
// issue at field.
func checkWorkflowYAML(src, field string) (workflowDoc, []sdk.WorkflowRunPreflightIssue) {
	var issues []sdk.WorkflowRunPreflightIssue
	add := func(format string, args ...any) {
		issues = append(issues, sdk.WorkflowRunPreflightIssue{Code: sdk.CodeDefinitionInvalid, Field: field, Message: fmt.Sprintf(format, args...)})
	}
	if strings.TrimSpace(src) == "" {
		add("the workflow YAML is empty")
		return workflowDoc{}, issues
	}
	d, err := parseWorkflow(src)
	if errors.Is(err, io.EOF) {
		add("the workflow YAML holds no document")
		return d, issues
	}
	if err != nil {
		add("the workflow YAML does not parse: %v", err)
		return d, issues
	}
	if d.MaxAttempts < 0 || d.MaxAttempts > 20 {
		add("max_attempts must be between 1 and 20, not %d", d.MaxAttempts)
	}
	for _, t := range d.Tags {
		if strings.TrimSpace(t) == "" || len(t) > 100 {
			add("tags must be non-empty names of at most 100 characters")
			break
		}
	}
	if strings.ContainsRune(d.Workdir, 0) || len(d.Workdir) > 1000 {
		add("workdir is not a valid directory name")
	}
	if d.RunnerPool != "" && !runnerPoolName().MatchString(d.RunnerPool) {
		add("runner_pool %q is not a pool name (letters, digits, '.', '_' and '-', at most 100)", d.RunnerPool)
	}
	if len(d.Agent) > 100 || len(d.Model) > 200 || len(d.Name) > 100 {
		add("agent, model or name is too long")
	}
	return d, issues
}

func definitionError(issues []sdk.WorkflowRunPreflightIssue) *apiError {
	e := errorf(http.StatusUnprocessableEntity, sdk.CodeDefinitionInvalid, "the workflow definition is not valid: %d issue(s)", len(issues))
	for _, i := range issues {
		e.Details = append(e.Details, sdk.ErrorDetail{Field: i.Field, Message: i.Message})
	}
	e.Extra = map[string]any{"data": map[string]any{"issues": issues}}
	return e
}

func definitionOut(d store.WorkflowDefinition, latest store.WorkflowDefinitionVersion, versions []store.WorkflowDefinitionVersion, withYAML bool) sdk.WorkflowDefinition {
	out := sdk.WorkflowDefinition{ID: d.ID, WorkspaceID: d.WorkspaceID, Name: d.Name, Description: d.Description, LatestVersion: d.LatestVersion,
		LatestVersionID: latest.ID, Digest: latest.Digest, CreatedBy: d.CreatedBy, CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt}
	if withYAML {
		out.YAML = latest.YAML
	}
	for _, v := range versions {
		out.Versions = append(out.Versions, versionOut(v, false))
	}
	return out
}

func versionOut(v store.WorkflowDefinitionVersion, withYAML bool) sdk.WorkflowDefinitionVersion {
	out := sdk.WorkflowDefinitionVersion{ID: v.ID, DefinitionID: v.DefinitionID, Version: v.Version, Digest: v.Digest, CreatedBy: v.CreatedBy, CreatedAt: v.CreatedAt}
	if withYAML {
		out.YAML = v.YAML
	}
	return out
}

// loadDefinition reads the {workflowDefinition} of the path.
func (c *call) loadDefinition(defs store.WorkflowDefinitions) (store.WorkflowDefinition, error) {
	id := c.r.PathValue("workflowDefinition")
	d, err := defs.WorkflowDefinition(c.ctx(), c.ws.ID, id)
	if errors.Is(err, store.ErrNotFound) {
		return d, notFound("no workflow definition %q", id)
	}
	return d, err
}

func (s *Server) listDefinitions(c *call) (int, any, error) {
	defs, err := c.defStore()
	if err != nil {
		return 0, nil, err
	}
	list, err := defs.WorkflowDefinitions(c.ctx(), c.ws.ID)
	if err != nil {
		return 0, nil, err
	}
	out := make([]sdk.WorkflowDefinition, 0, len(list))
	for _, d := range list {
		latest, err := defs.LatestWorkflowDefinitionVersion(c.ctx(), c.ws.ID, d.ID)
		if err != nil {
			return 0, nil, err
		}
		out = append(out, definitionOut(d, latest, nil, false))
	}
	return 200, sdk.WorkflowDefinitionCollectionResponse{Data: out, Meta: sdk.ListMeta{Count: len(out)}}, nil
}

func (s *Server) createDefinition(c *call) (int, any, error) {
	defs, err := c.defStore()
	if err != nil {
		return 0, nil, err
	}
	var req sdk.WorkflowDefinitionCreateRequest
	if err := decodeBody(c, &req); err != nil {
		return 0, nil, err
	}
	doc, issues := checkWorkflowYAML(req.YAML, "/yaml")
	name := strings.TrimSpace(firstNonEmpty(req.Name, doc.Name))
	if name == "" && len(issues) == 0 {
		issues = append(issues, sdk.WorkflowRunPreflightIssue{Code: sdk.CodeDefinitionInvalid, Field: "/name", Message: "name the definition (name, or name: in the YAML)"})
	}
	if len(issues) > 0 {
		return 0, nil, definitionError(issues)
	}
	now, actor := c.now(), c.p.Actor()
	d := store.WorkflowDefinition{ID: newRecordID(), WorkspaceID: c.ws.ID, Name: name, Description: firstNonEmpty(req.Description, doc.Description),
		CreatedBy: actor, CreatedAt: now, UpdatedAt: now}
	v := store.WorkflowDefinitionVersion{ID: newRecordID(), YAML: req.YAML, Digest: workflowDigest(req.YAML), CreatedBy: actor, CreatedAt: now}
	audit := c.audit("workflow_definition.create", "workflow-definitions/"+d.ID, map[string]any{"name": name, "version_id": v.ID, "digest": v.Digest})
	if err := defs.CreateWorkflowDefinition(c.ctx(), &d, &v, audit); errors.Is(err, store.ErrConflict) {
		return 0, nil, errorf(http.StatusConflict, sdk.CodeConflict, "a workflow definition named %q exists; add a version to it instead", name)
	} else if err != nil {
		return 0, nil, err
	}
	return 201, sdk.WorkflowDefinitionResponse{Data: definitionOut(d, v, []store.WorkflowDefinitionVersion{v}, true)}, nil
}

func (s *Server) getDefinition(c *call) (int, any, error) {
	defs, err := c.defStore()
	if err != nil {
		return 0, nil, err
	}
	d, err := c.loadDefinition(defs)
	if err != nil {
		return 0, nil, err
	}
	versions, err := defs.WorkflowDefinitionVersions(c.ctx(), c.ws.ID, d.ID)
	if err != nil {
		return 0, nil, err
	}
	var latest store.WorkflowDefinitionVersion
	for _, v := range versions {
		if v.Version == d.LatestVersion {
			latest = v
		}
	}
	return 200, sdk.WorkflowDefinitionResponse{Data: definitionOut(d, latest, versions, true)}, nil
}

func (s *Server) addDefinitionVersion(c *call) (int, any, error) {
	defs, err := c.defStore()
	if err != nil {
		return 0, nil, err
	}
	var req sdk.WorkflowDefinitionVersionCreateRequest
	if err := decodeBody(c, &req); err != nil {
		return 0, nil, err
	}
	d, err := c.loadDefinition(defs)
	if err != nil {
		return 0, nil, err
	}
	if _, issues := checkWorkflowYAML(req.YAML, "/yaml"); len(issues) > 0 {
		return 0, nil, definitionError(issues)
	}
	now := c.now()
	v := store.WorkflowDefinitionVersion{ID: newRecordID(), YAML: req.YAML, Digest: workflowDigest(req.YAML), CreatedBy: c.p.Actor(), CreatedAt: now}
	audit := c.audit("workflow_definition.version", "workflow-definitions/"+d.ID, map[string]any{"version_id": v.ID, "digest": v.Digest})
	got, created, err := defs.AddWorkflowDefinitionVersion(c.ctx(), c.ws.ID, d.ID, v, audit)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil, notFound("no workflow definition %q", d.ID)
	}
	if err != nil {
		return 0, nil, err
	}
	status := 201
	if !created {
		status = 200
	}
	return status, sdk.WorkflowDefinitionVersionResponse{Data: versionOut(got, true)}, nil
}

func (s *Server) getDefinitionVersion(c *call) (int, any, error) {
	defs, err := c.defStore()
	if err != nil {
		return 0, nil, err
	}
	d, err := c.loadDefinition(defs)
	if err != nil {
		return 0, nil, err
	}
	id := c.r.PathValue("workflowVersion")
	v, err := defs.WorkflowDefinitionVersion(c.ctx(), c.ws.ID, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && v.DefinitionID != d.ID) {
		return 0, nil, notFound("no version %q of workflow definition %q", id, d.ID)
	}
	if err != nil {
		return 0, nil, err
	}
	return 200, sdk.WorkflowDefinitionVersionResponse{Data: versionOut(v, true)}, nil
}

func (s *Server) deleteDefinition(c *call) (int, any, error) {
	defs, err := c.defStore()
	if err != nil {
		return 0, nil, err
	}
	d, err := c.loadDefinition(defs)
	if err != nil {
		return 0, nil, err
	}
	if d.CreatedBy != c.p.Actor() && auth.RoleRank(c.role) < auth.RoleRank(sdk.RoleAdmin) {
		return 0, nil, forbidden("only the definition's creator (%s) or a workspace owner or admin deletes it", d.CreatedBy)
	}
	latest, err := defs.LatestWorkflowDefinitionVersion(c.ctx(), c.ws.ID, d.ID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return 0, nil, err
	}
	audit := c.audit("workflow_definition.delete", "workflow-definitions/"+d.ID, map[string]any{"name": d.Name, "latest_version": d.LatestVersion, "digest": latest.Digest})
	gone, err := defs.DeleteWorkflowDefinition(c.ctx(), c.ws.ID, d.ID, audit)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return 0, nil, notFound("no workflow definition %q", d.ID)
	case errors.Is(err, store.ErrConflict):
		return 0, nil, errorf(http.StatusConflict, sdk.CodeConflict, "%s; cancel them or let them finish first", strings.TrimPrefix(err.Error(), store.ErrConflict.Error()+": "))
	case err != nil:
		return 0, nil, err
	}
	return 200, sdk.WorkflowDefinitionResponse{Data: definitionOut(gone, latest, nil, false)}, nil
}

// resolveDefinition turns the run request's workflow_definition_id and
// workflow_version_id into the stored version it runs (the definition's
// latest when only the definition is named), and checks a given
// workflow_digest and yaml_snapshot against it. Problems are issues of q.
func (s *Server) resolveDefinition(c *call, q *runRequest) error {
	if q.DefinitionID == "" && q.VersionID == "" {
		if q.YAMLSnapshot != "" {
			q.digest = workflowDigest(q.YAMLSnapshot)
			if q.WorkflowDigest != "" && q.WorkflowDigest != q.digest {
				q.issue("workflow_digest_mismatch", "/workflow_digest", "the workflow YAML's digest is %s, not %s", q.digest, q.WorkflowDigest)
			}
		}
		return nil
	}
	defs, err := c.defStore()
	if err != nil {
		return err
	}
	var v store.WorkflowDefinitionVersion
	if q.VersionID != "" {
		v, err = defs.WorkflowDefinitionVersion(c.ctx(), c.ws.ID, q.VersionID)
		if errors.Is(err, store.ErrNotFound) {
			q.issue("workflow_version_unknown", "/workflow_version_id", "no workflow definition version %q in this workspace", q.VersionID)
			return nil
		}
		if err != nil {
			return err
		}
		if q.DefinitionID != "" && v.DefinitionID != q.DefinitionID {
			q.issue("workflow_version_mismatch", "/workflow_version_id", "version %s belongs to workflow definition %s, not %s", v.ID, v.DefinitionID, q.DefinitionID)
			return nil
		}
	} else {
		v, err = defs.LatestWorkflowDefinitionVersion(c.ctx(), c.ws.ID, q.DefinitionID)
		if errors.Is(err, store.ErrNotFound) {
			q.issue("workflow_definition_unknown", "/workflow_definition_id", "no workflow definition %q in this workspace", q.DefinitionID)
			return nil
		}
		if err != nil {
			return err
		}
	}
	if q.YAMLSnapshot != "" && q.YAMLSnapshot != v.YAML {
		q.issue("definition_conflict", "/yaml_snapshot", "the yaml_snapshot is not the YAML of workflow definition version %s (%s); send one or the other", v.ID, v.Digest)
		return nil
	}
	if q.WorkflowDigest != "" && q.WorkflowDigest != v.Digest {
		q.issue("workflow_digest_mismatch", "/workflow_digest", "workflow definition version %s has digest %s, not %s: the definition changed", v.ID, v.Digest, q.WorkflowDigest)
		return nil
	}
	q.DefinitionID, q.VersionID, q.YAMLSnapshot, q.digest = v.DefinitionID, v.ID, v.YAML, v.Digest
	return nil
}
