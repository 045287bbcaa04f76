package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"reeve.dev/reeve/contextvault/relevance"
	"reeve.dev/reeve/contextvault/seal"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// A session's working set: the context sources it may draw on and, among
// their entries, those whose descriptors fit its task. The server scores
// descriptors only; devices decrypt what they retrieve.

// maxWorkingSetEntries bounds the entries a working set lists.
const maxWorkingSetEntries = 200

// sessionCall begins a session route: the store and the {agentSession}.
func (c *call) sessionCall() (store.ContextVaults, sdk.Record, error) {
	cv, err := c.cvStore()
	if err != nil {
		return nil, sdk.Record{}, err
	}
	sess, err := c.session()
	return cv, sess, err
}

// sessionTask is what a session is about: its title, summary and
// metadata.task.
func sessionTask(sess sdk.Record) string {
	parts := []string{attrs(sess, "title"), attrs(sess, "summary")}
	if md, ok := sess.Attributes["metadata"].(map[string]any); ok {
		if t, ok := md["task"].(string); ok {
			parts = append(parts, t)
		}
	}
	return strings.TrimSpace(strings.Join(parts, "\n"))
}

// sessionSources are the sources a session names in
// metadata.context_source_ids, else every active source of the workspace.
func (c *call) sessionSources(cv store.ContextVaults, sess sdk.Record) ([]store.ContextSource, error) {
	all, err := cv.ContextSources(c.ctx(), c.ws.ID)
	if err != nil {
		return nil, err
	}
	var named []string
	if md, ok := sess.Attributes["metadata"].(map[string]any); ok {
		if ids, ok := md["context_source_ids"].([]any); ok {
			for _, id := range ids {
				named = append(named, toString(id))
			}
		}
	}
	var out []store.ContextSource
	for _, s := range all {
		if s.State != "active" {
			continue
		}
		if named != nil && !slices.Contains(named, s.ID) && !slices.Contains(named, s.Name) {
			continue
		}
		out = append(out, s)
	}
	return out, nil
}

// scoreDescriptors ranks descriptors of sources for a task, best first.
func scoreDescriptors(task string, srcs []store.ContextSource, byID map[string][]sdk.ContextDescriptor, limit int) []sdk.ContextDescriptor {
	q := relevance.Prepare(relevance.Query{Task: task})
	var all []sdk.ContextDescriptor
	for _, s := range srcs {
		base := q.Score(relevance.Doc{UseWhen: s.UseWhen, UpdateWhen: s.UpdateWhen})
		for _, d := range byID[s.ID] {
			d.Score = base + q.Score(relevance.Doc{UseWhen: d.UseWhen, UpdateWhen: d.UpdateWhen, Path: d.Path})
			all = append(all, d)
		}
	}
	top := relevance.Top(all, func(d sdk.ContextDescriptor) float64 { return d.Score }, limit)
	out := make([]sdk.ContextDescriptor, len(top))
	for i, r := range top {
		out[i] = r.Item
	}
	return out
}

func (c *call) composeWorkingSet(cv store.ContextVaults, sess sdk.Record) (sdk.ContextWorkingSet, error) {
	srcs, err := c.sessionSources(cv, sess)
	if err != nil {
		return sdk.ContextWorkingSet{}, err
	}
	byID := map[string][]sdk.ContextDescriptor{}
	ids := make([]string, 0, len(srcs))
	for _, s := range srcs {
		ds, err := c.descriptors(cv, s)
		if err != nil {
			return sdk.ContextWorkingSet{}, err
		}
		for i := range ds {
			ds[i].Ciphertext = ""
		}
		byID[s.ID] = ds
		ids = append(ids, s.ID)
	}
	task := sessionTask(sess)
	w := sdk.ContextWorkingSet{SessionID: sess.ID, Task: task, SourceIDs: ids, ComposedAt: c.now(),
		Entries: scoreDescriptors(task, srcs, byID, maxWorkingSetEntries)}
	if w.Entries == nil {
		w.Entries = []sdk.ContextDescriptor{}
	}
	if err := cv.PutContextWorkingSet(c.ctx(), store.ContextWorkingSet{WorkspaceID: c.ws.ID, SessionID: sess.ID, Task: task, SourceIDs: ids, ComposedAt: w.ComposedAt}); err != nil {
		return w, err
	}
	return w, nil
}

// workingSetIDs is the session's working set as last composed, composing
// it when it never was.
func (c *call) workingSetIDs(cv store.ContextVaults, sess sdk.Record) ([]string, error) {
	w, err := cv.ContextWorkingSet(c.ctx(), c.ws.ID, sess.ID)
	if err == nil {
		return w.SourceIDs, nil
	}
	ws, err := c.composeWorkingSet(cv, sess)
	return ws.SourceIDs, err
}

func (s *Server) cvWorkingSet(c *call) (int, any, error) {
	cv, sess, err := c.sessionCall()
	if err != nil {
		return 0, nil, err
	}
	w, err := c.composeWorkingSet(cv, sess)
	if err != nil {
		return 0, nil, err
	}
	return 200, data(w), nil
}

// cvRetrieve searches the descriptors of the session's working set; a
// source outside it is refused (422), never silently searched or dropped.
func (s *Server) cvRetrieve(c *call) (int, any, error) {
	cv, sess, err := c.sessionCall()
	if err != nil {
		return 0, nil, err
	}
	set, err := c.workingSetIDs(cv, sess)
	if err != nil {
		return 0, nil, err
	}
	picked := set
	if want, ok := c.body["context_source_ids"].([]any); ok && len(want) > 0 {
		picked = nil
		var details []sdk.ErrorDetail
		for i, w := range want {
			id := toString(w)
			if !slices.Contains(set, id) {
				details = append(details, sdk.ErrorDetail{Field: fmt.Sprintf("/context_source_ids/%d", i), Message: id + " is outside the session working set"})
				continue
			}
			picked = append(picked, id)
		}
		if len(details) > 0 {
			return 0, nil, &apiError{Status: http.StatusUnprocessableEntity, Code: sdk.CodeOutsideWorkingSet, Message: "a requested source is outside the session working set", Details: details}
		}
	}
	limit := int(queryIntValue(c.body["limit"], 10))
	limit = min(limit, 100)
	var srcs []store.ContextSource
	byID := map[string][]sdk.ContextDescriptor{}
	for _, id := range picked {
		src, err := cv.ContextSource(c.ctx(), c.ws.ID, id)
		if err != nil {
			continue // removed since the set was composed
		}
		ds, err := c.descriptors(cv, src)
		if err != nil {
			return 0, nil, err
		}
		srcs = append(srcs, src)
		byID[src.ID] = ds
	}
	query := c.body["query"].(string)
	out := sdk.ContextRetrieval{Query: query, SourceIDs: picked, Results: scoreDescriptors(query, srcs, byID, limit)}
	if out.SourceIDs == nil {
		out.SourceIDs = []string{}
	}
	if out.Results == nil {
		out.Results = []sdk.ContextDescriptor{}
	}
	return 200, map[string]any{"data": out, "meta": sdk.ListMeta{Count: len(out.Results)}}, nil
}

// cvCorrection turns a session's context correction into a proposal for
// a human: its content is sealed to the source's devices on arrival and
// only the seal and a digest are kept.
func (s *Server) cvCorrection(c *call) (int, any, error) {
	cv, sess, err := c.sessionCall()
	if err != nil {
		return 0, nil, err
	}
	set, err := c.workingSetIDs(cv, sess)
	if err != nil {
		return 0, nil, err
	}
	var srcID string
	if v, ok := c.body["context_source_id"]; ok && v != nil {
		srcID = toString(v)
		if !slices.Contains(set, srcID) {
			return 0, nil, &apiError{Status: http.StatusUnprocessableEntity, Code: sdk.CodeOutsideWorkingSet, Message: "the context source is outside the session working set",
				Details: []sdk.ErrorDetail{{Field: "/context_source_id", Message: srcID + " is outside the session working set"}}}
		}
	} else {
		var vaults []string
		for _, id := range set {
			if src, err := cv.ContextSource(c.ctx(), c.ws.ID, id); err == nil && src.Kind == sdk.ContextKindVault {
				vaults = append(vaults, id)
			}
		}
		if len(vaults) != 1 {
			return 0, nil, invalid(sdk.ErrorDetail{Field: "/context_source_id", Message: fmt.Sprintf("the working set has %d vaults: name the context_source_id", len(vaults))})
		}
		srcID = vaults[0]
	}
	el, err := cv.EligibleContextDevices(c.ctx(), c.ws.ID, srcID)
	if err != nil {
		return 0, nil, err
	}
	if len(el) == 0 {
		return 0, nil, &apiError{Status: http.StatusUnprocessableEntity, Code: sdk.CodeNoDevice, Message: "the source has no device to receive the correction; a member must run `reeve context init` first"}
	}
	content := sdk.ContextProposalContent{CorrectionKind: c.body["correction_kind"].(string), TargetKind: c.body["target_kind"].(string), Title: c.body["title"].(string)}
	content.Summary, _ = c.body["summary"].(string)
	content.ProposedText, _ = c.body["proposed_text"].(string)
	content.Metadata, _ = c.body["metadata"].(map[string]any)
	plain, err := json.Marshal(content)
	if err != nil {
		return 0, nil, err
	}
	pubs := make([]seal.Public, len(el))
	to := make([]string, len(el))
	for i, d := range el {
		pubs[i], to[i] = seal.Public{Recipient: d.Recipient, SigningKey: d.SigningKey}, d.ID
	}
	sealed, err := seal.SealTo(plain, pubs...)
	if err != nil {
		return 0, nil, err
	}
	p := store.ContextProposal{ID: newRecordID(), WorkspaceID: c.ws.ID, SourceID: srcID, SessionID: sess.ID, CorrectionKind: content.CorrectionKind,
		TargetKind: content.TargetKind, State: sdk.ProposalPending, Digest: seal.Digest(plain), Sealed: sealed, SealedTo: to, CreatedBy: c.p.Actor(), CreatedAt: c.now()}
	if err := cv.CreateContextProposal(c.ctx(), p, c.audit("context_proposal.create", cvTarget("proposals", p.ID), map[string]any{"session_id": sess.ID, "context_source_id": srcID, "correction_kind": p.CorrectionKind})); err != nil {
		return 0, nil, err
	}
	return 201, data(cvProposalJSON(p, false)), nil
}
