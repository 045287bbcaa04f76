package api

import (
	"strings"

	"reeve.dev/reeve/server/auth"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// People's view of context sources and vaults: names and server-visible
// descriptors, members, epochs. Any member of the workspace reads them;
// a source's owners (and workspace admins) change them.

func (s *Server) cvListSources(kind string) handlerFunc {
	return func(c *call) (int, any, error) {
		cv, err := c.cvStore()
		if err != nil {
			return 0, nil, err
		}
		srcs, err := cv.ContextSources(c.ctx(), c.ws.ID)
		if err != nil {
			return 0, nil, err
		}
		out := []sdk.ContextSource{}
		for _, src := range srcs {
			if kind != "" && src.Kind != kind {
				continue
			}
			j := cvSourceJSON(src)
			if c.p.Kind == auth.KindUser {
				ms, err := cv.ContextMembers(c.ctx(), src.ID)
				if err != nil {
					return 0, nil, err
				}
				j.Role = memberRole(ms, c.p.UserID)
			}
			out = append(out, j)
		}
		return 200, list(out), nil
	}
}

func (s *Server) cvCreateSource(kind string) handlerFunc {
	return func(c *call) (int, any, error) {
		cv, err := c.cvStore()
		if err != nil {
			return 0, nil, err
		}
		var req sdk.ContextSourceRequest
		if err := c.decode(&req); err != nil {
			return 0, nil, err
		}
		if kind != "" {
			if req.Kind != "" && req.Kind != kind {
				return 0, nil, invalid(sdk.ErrorDetail{Field: "/kind", Message: "a context vault is of kind vault"})
			}
			req.Kind = kind
		}
		src, err := c.newSource(cv, req, c.p.UserID)
		if err != nil {
			return 0, nil, err
		}
		return 201, data(src), nil
	}
}

// newSource creates a source owned by owner.
func (c *call) newSource(cv store.ContextVaults, req sdk.ContextSourceRequest, owner int64) (sdk.ContextSource, error) {
	if req.Kind == "" {
		req.Kind = sdk.ContextKindVault
	}
	if req.Kind == sdk.ContextKindGit && req.RepoURL == "" {
		return sdk.ContextSource{}, invalid(sdk.ErrorDetail{Field: "/repo_url", Message: "a git source needs the repository's URL"})
	}
	if req.Kind == sdk.ContextKindVault && (req.RepoURL != "" || req.Provider != "" || req.Branch != "") {
		return sdk.ContextSource{}, invalid(sdk.ErrorDetail{Field: "/repo_url", Message: "a vault has no repository"})
	}
	now := c.now()
	src := store.ContextSource{ID: newRecordID(), WorkspaceID: c.ws.ID, Kind: req.Kind, Name: strings.TrimSpace(req.Name), Description: req.Description,
		UseWhen: req.UseWhen, UpdateWhen: req.UpdateWhen, RepoURL: req.RepoURL, Provider: req.Provider, Branch: req.Branch,
		State: "active", CreatedBy: c.p.Actor(), CreatedAt: now, UpdatedAt: now}
	if err := cv.CreateContextSource(c.ctx(), src, owner, c.audit("context_source.create", cvTarget("sources", src.ID), map[string]string{"kind": src.Kind, "name": src.Name})); err != nil {
		return sdk.ContextSource{}, cvError(err)
	}
	j := cvSourceJSON(src)
	j.Role = sdk.ContextMemberOwner
	return j, nil
}

func (s *Server) cvGetSource(kind string) handlerFunc {
	return func(c *call) (int, any, error) {
		cv, src, err := c.sourceCall(sourceParam(kind), kind)
		if err != nil {
			return 0, nil, err
		}
		j, err := c.sourceWithMembers(cv, src)
		if err != nil {
			return 0, nil, err
		}
		return 200, data(j), nil
	}
}

// sourceCall begins a source route: the store and the source the path
// parameter names (by id or name), of the kind when one is given.
func (c *call) sourceCall(param, kind string) (store.ContextVaults, store.ContextSource, error) {
	cv, err := c.cvStore()
	if err != nil {
		return nil, store.ContextSource{}, err
	}
	src, err := c.source(cv, c.r.PathValue(param), kind)
	return cv, src, err
}

func sourceParam(kind string) string {
	if kind == sdk.ContextKindVault {
		return "contextVault"
	}
	return "contextSource"
}

func (c *call) sourceWithMembers(cv store.ContextVaults, src store.ContextSource) (sdk.ContextSource, error) {
	ms, err := cv.ContextMembers(c.ctx(), src.ID)
	if err != nil {
		return sdk.ContextSource{}, err
	}
	users, err := c.s.st.Members(c.ctx(), c.ws.ID)
	if err != nil {
		return sdk.ContextSource{}, err
	}
	emails := map[int64]string{}
	for _, u := range users {
		emails[u.UserID] = u.Email
	}
	j := cvSourceJSON(src)
	for _, m := range ms {
		j.Members = append(j.Members, sdk.ContextMember{UserID: m.UserID, Email: emails[m.UserID], Role: m.Role, State: m.State, AddedBy: m.AddedBy, AddedAt: m.AddedAt, RemovedAt: m.RemovedAt})
	}
	if c.p.Kind == auth.KindUser {
		j.Role = memberRole(ms, c.p.UserID)
	}
	return j, nil
}

// cvUpdateSource changes a source's server-visible settings: PUT replaces
// them, PATCH changes the fields given. rotation_requested asks the
// vault's devices to rotate its epoch.
func (s *Server) cvUpdateSource(kind string, merge bool) handlerFunc {
	return func(c *call) (int, any, error) {
		cv, src, err := c.sourceCall(sourceParam(kind), kind)
		if err != nil {
			return 0, nil, err
		}
		ms, err := cv.ContextMembers(c.ctx(), src.ID)
		if err != nil {
			return 0, nil, err
		}
		if memberRole(ms, c.p.UserID) != sdk.ContextMemberOwner && auth.RoleRank(c.role) < auth.RoleRank(sdk.RoleAdmin) {
			return 0, nil, forbidden("only an owner of the source or a workspace admin changes it")
		}
		b := c.body
		str := func(k string) (string, bool) { v, ok := b[k].(string); return v, ok }
		if _, ok := b["kind"]; ok && b["kind"] != src.Kind {
			return 0, nil, invalid(sdk.ErrorDetail{Field: "/kind", Message: "a source's kind cannot change"})
		}
		if src.Kind == sdk.ContextKindVault {
			for _, f := range []string{"repo_url", "provider", "branch"} {
				if _, ok := b[f]; ok {
					return 0, nil, invalid(sdk.ErrorDetail{Field: "/" + f, Message: "a vault has no repository"})
				}
			}
		}
		if !merge {
			if _, ok := str("name"); !ok {
				return 0, nil, invalid(sdk.ErrorDetail{Field: "/name", Message: "PUT replaces the settings: name is required"})
			}
		}
		out, err := cv.UpdateContextSource(c.ctx(), c.ws.ID, src.ID, func(cur *store.ContextSource) error {
			set := func(k string, dst *string) {
				if v, ok := str(k); ok {
					*dst = v
				} else if !merge {
					*dst = ""
				}
			}
			set("description", &cur.Description)
			set("use_when", &cur.UseWhen)
			set("update_when", &cur.UpdateWhen)
			if v, ok := str("name"); ok {
				cur.Name = strings.TrimSpace(v)
			}
			if cur.Kind == sdk.ContextKindGit {
				set("provider", &cur.Provider)
				set("branch", &cur.Branch)
				if v, ok := str("repo_url"); ok && v != "" {
					cur.RepoURL = v
				}
			}
			if v, ok := str("state"); ok {
				cur.State = v
			}
			if r, ok := b["rotation_requested"].(bool); ok && cur.Kind == sdk.ContextKindVault {
				if r {
					now := c.now()
					cur.RotationRequestedAt = &now
				} else {
					cur.RotationRequestedAt = nil
				}
			}
			cur.UpdatedAt = c.now()
			return nil
		}, c.audit("context_source.update", cvTarget("sources", src.ID), b))
		if err != nil {
			return 0, nil, cvError(err)
		}
		j, err := c.sourceWithMembers(cv, out)
		if err != nil {
			return 0, nil, err
		}
		return 200, data(j), nil
	}
}

// cvIndex answers a source's descriptor index: its live entries as the
// server sees them (descriptors, no content), conflicts counted.
func (s *Server) cvIndex(c *call) (int, any, error) {
	cv, src, err := c.sourceCall("contextSource", "")
	if err != nil {
		return 0, nil, err
	}
	ds, err := c.descriptors(cv, src)
	if err != nil {
		return 0, nil, err
	}
	conflicts := 0
	for i := range ds {
		ds[i].Ciphertext = ""
		if ds[i].Conflict {
			conflicts++
		}
	}
	if ds == nil {
		ds = []sdk.ContextDescriptor{}
	}
	return 200, data(map[string]any{"context_source_id": src.ID, "kind": src.Kind, "head_seq": src.HeadSeq, "epoch": src.Epoch,
		"entries": len(ds), "conflicts": conflicts, "descriptors": ds}), nil
}

// cvSyncGit asks the devices that hold a git source to fetch it again
// and report its documents (sync_state requested → synced).
func (s *Server) cvSyncGit(c *call) (int, any, error) {
	cv, src, err := c.sourceCall("contextSource", "")
	if err != nil {
		return 0, nil, err
	}
	if src.Kind != sdk.ContextKindGit {
		return 0, nil, invalid(sdk.ErrorDetail{Message: "only a git source is synced from git; a vault syncs through its devices"})
	}
	out, err := cv.UpdateContextSource(c.ctx(), c.ws.ID, src.ID, func(cur *store.ContextSource) error {
		cur.SyncState, cur.UpdatedAt = "requested", c.now()
		return nil
	}, c.audit("context_source.sync_requested", cvTarget("sources", src.ID), c.body))
	if err != nil {
		return 0, nil, cvError(err)
	}
	return 200, data(cvSourceJSON(out)), nil
}

// cvEpochs lists every vault's epochs with how many devices got each key.
func (s *Server) cvEpochs(c *call) (int, any, error) {
	cv, err := c.cvStore()
	if err != nil {
		return 0, nil, err
	}
	eps, err := cv.ContextEpochs(c.ctx(), c.ws.ID)
	if err != nil {
		return 0, nil, err
	}
	out := make([]sdk.ContextEpoch, len(eps))
	for i, e := range eps {
		out[i] = sdk.ContextEpoch{VaultID: e.SourceID, Epoch: e.Epoch, CreatedBy: e.CreatedBy, Reason: e.Reason, Recipients: e.Recipients, CreatedAt: e.CreatedAt}
	}
	return 200, list(out), nil
}
