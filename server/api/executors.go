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

// Managed executors (docs/workers.md): a workspace's worker identities.
// Each has one runner credential, returned once at creation and at
// rotation, kept only as its hash; its tags are its capabilities.

// wfStore is the store's team-worker part: 501 when the store has none.
func (c *call) wfStore() (store.Workflows, error) {
	if w, ok := c.s.st.(store.Workflows); ok {
		return w, nil
	}
	return nil, errorf(http.StatusNotImplemented, "not_implemented", "this server's store does not keep workflow runs")
}

func executorOut(e store.ManagedExecutor) sdk.ManagedExecutor {
	return sdk.ManagedExecutor{ID: e.ID, WorkspaceID: e.WorkspaceID, Name: e.Name, Tags: nonNil(e.Tags), Agents: nonNil(e.Agents),
		CredentialPrefix: e.TokenPrefix, CreatedBy: e.CreatedBy, CreatedAt: e.CreatedAt, RotatedAt: e.RotatedAt, LastSeenAt: e.LastSeenAt}
}

func nonNil(v []string) []string {
	if v == nil {
		return []string{}
	}
	return v
}

// cleanList trims, drops empties and duplicates, and sorts: tags and
// agents compare as sets.
func cleanList(v []string) []string {
	out := []string{}
	for _, s := range v {
		if s = strings.TrimSpace(s); s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

func newRunnerCredential() (plain, hash string, err error) {
	plain, err = auth.NewToken(sdk.RunnerCredentialPrefix)
	if err != nil {
		return "", "", err
	}
	return plain, auth.Hash(plain), nil
}

func (s *Server) listExecutors(c *call) (int, any, error) {
	wf, err := c.wfStore()
	if err != nil {
		return 0, nil, err
	}
	list, err := wf.Executors(c.ctx(), c.ws.ID)
	if err != nil {
		return 0, nil, err
	}
	out := make([]sdk.ManagedExecutor, 0, len(list))
	for _, e := range list {
		out = append(out, executorOut(e))
	}
	return 200, sdk.ManagedExecutorCollectionResponse{Data: out, Meta: sdk.ListMeta{Count: len(out)}}, nil
}

func (s *Server) createExecutor(c *call) (int, any, error) {
	wf, err := c.wfStore()
	if err != nil {
		return 0, nil, err
	}
	var req sdk.ManagedExecutorCreateRequest
	if err := decodeBody(c, &req); err != nil {
		return 0, nil, err
	}
	req.Name = strings.TrimSpace(req.Name)
	if req.Name == "" {
		return 0, nil, invalid(sdk.ErrorDetail{Field: "/name", Message: "a name is required"})
	}
	plain, hash, err := newRunnerCredential()
	if err != nil {
		return 0, nil, err
	}
	e := store.ManagedExecutor{ID: newRecordID(), WorkspaceID: c.ws.ID, Name: req.Name, Tags: cleanList(req.Tags), Agents: cleanList(req.Agents),
		TokenHash: hash, TokenPrefix: auth.DisplayPrefix(plain), CreatedBy: c.p.Actor(), CreatedAt: c.now()}
	err = wf.CreateExecutor(c.ctx(), e, c.audit("managed_executor.create", "managed-executors/"+e.ID, map[string]any{"name": e.Name, "tags": e.Tags, "agents": e.Agents}))
	if errors.Is(err, store.ErrConflict) {
		return 0, nil, errorf(http.StatusConflict, sdk.CodeConflict, "a managed executor named %q exists in this workspace", e.Name)
	}
	if err != nil {
		return 0, nil, err
	}
	out := executorOut(e)
	out.Credential = plain
	return 201, sdk.ManagedExecutorResponse{Data: out}, nil
}

// updateExecutor applies fn to the {managedExecutor} of the path.
func (s *Server) updateExecutor(c *call, action string, fn func(*store.ManagedExecutor) error, detail any) (store.ManagedExecutor, error) {
	wf, err := c.wfStore()
	if err != nil {
		return store.ManagedExecutor{}, err
	}
	id := c.r.PathValue("managedExecutor")
	e, err := wf.UpdateExecutor(c.ctx(), c.ws.ID, id, fn, c.audit(action, "managed-executors/"+id, detail))
	if errors.Is(err, store.ErrNotFound) {
		return e, notFound("no managed executor %q", id)
	}
	return e, err
}

func (s *Server) rotateExecutor(c *call) (int, any, error) {
	plain, hash, err := newRunnerCredential()
	if err != nil {
		return 0, nil, err
	}
	now := c.now()
	e, err := s.updateExecutor(c, "managed_executor.rotate_credential", func(e *store.ManagedExecutor) error {
		e.TokenHash, e.TokenPrefix, e.RotatedAt = hash, auth.DisplayPrefix(plain), &now
		return nil
	}, nil)
	if err != nil {
		return 0, nil, err
	}
	out := executorOut(e)
	out.Credential = plain
	return 200, sdk.ManagedExecutorResponse{Data: out}, nil
}

func (s *Server) setExecutorTags(c *call) (int, any, error) {
	var req sdk.ManagedExecutorTagsRequest
	if err := decodeBody(c, &req); err != nil {
		return 0, nil, err
	}
	tags := cleanList(req.Tags)
	e, err := s.updateExecutor(c, "managed_executor.tags", func(e *store.ManagedExecutor) error { e.Tags = tags; return nil }, map[string]any{"tags": tags})
	if err != nil {
		return 0, nil, err
	}
	return 200, sdk.ManagedExecutorResponse{Data: executorOut(e)}, nil
}

func (s *Server) deleteExecutor(c *call) (int, any, error) {
	now := c.now()
	e, err := s.updateExecutor(c, "managed_executor.delete", func(e *store.ManagedExecutor) error { e.DeletedAt = &now; return nil }, nil)
	if err != nil {
		return 0, nil, err
	}
	return 200, sdk.ManagedExecutorResponse{Data: executorOut(e)}, nil
}

// runnerPrincipal resolves a runner credential or a lease token. Neither
// is cached: a rotated credential, a deleted executor or an ended lease
// stops at once on every replica, and the lookup is one indexed read.
func (s *Server) runnerPrincipal(c *call, tok string) (auth.Principal, error) {
	wf, ok := s.st.(store.Workflows)
	if !ok {
		return auth.Principal{}, errBadCredential
	}
	switch {
	case strings.HasPrefix(tok, sdk.RunnerCredentialPrefix):
		e, err := wf.ExecutorByTokenHash(c.ctx(), auth.Hash(tok))
		if errors.Is(err, store.ErrNotFound) {
			return auth.Principal{}, unauthenticated("the runner credential is not valid: it was rotated, its executor deleted, or it never existed")
		}
		if err != nil {
			return auth.Principal{}, err
		}
		return auth.Principal{Kind: auth.KindRunner, Workspace: e.WorkspaceID, ExecutorID: e.ID}, nil
	case strings.HasPrefix(tok, sdk.LeaseTokenPrefix):
		r, err := wf.RunByLeaseHash(c.ctx(), auth.Hash(tok))
		if errors.Is(err, store.ErrNotFound) {
			if lease, ok := leaseOfToken(tok); ok {
				e := errorf(http.StatusGone, sdk.CodeLeaseExpired, "lease %s is no longer held: it expired (the run was queued again) or it ended", lease)
				return auth.Principal{}, e
			}
			return auth.Principal{}, unauthenticated("the lease token is not valid")
		}
		if err != nil {
			return auth.Principal{}, err
		}
		return auth.Principal{Kind: auth.KindRunner, Workspace: r.WorkspaceID, ExecutorID: r.ExecutorID, LeaseID: r.LeaseID}, nil
	}
	return auth.Principal{}, errBadCredential
}

// refuseRunnerElsewhere answers 403 to a valid runner credential or lease
// token presented on a route that is not a runtime worker route: the
// credential is genuine, it is only not allowed there (spec 4.13: it lets
// a worker claim leases and report evidence, nothing else). An invalid
// one goes on to the route's own check, which answers 401.
func (s *Server) refuseRunnerElsewhere(c *call, tok string) error {
	if c.route.Auth == AuthRunner || (!strings.HasPrefix(tok, sdk.RunnerCredentialPrefix) && !strings.HasPrefix(tok, sdk.LeaseTokenPrefix)) {
		return nil
	}
	if _, err := s.runnerPrincipal(c, tok); err != nil {
		return nil
	}
	return forbidden("a runner credential is good only on the worker routes (/api/runtime/worker/...)")
}
