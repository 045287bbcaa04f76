package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"reeve.dev/reeve/server/auth"
	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
)

// engineKind is what the generic record engine does for a route.
type engineKind int

const (
	engNone engineKind = iota
	engList
	engCreate
	engGet
	engReplace
	engMerge
	engDelete
	engSingletonGet
	engSingletonPut
	engSingletonMerge
	engAction
)

func (k engineKind) String() string {
	return [...]string{"none", "list", "create", "get", "replace", "merge", "delete", "singleton-get", "singleton-put", "singleton-merge", "action"}[k]
}

const singletonKey = "singleton"

// collectionTemplate maps a route path to the engine's collection name:
// the path below /api with the workspace segments removed (the workspace is
// the record's scope, so /api/insights, /api/workspaces/{w}/insights and
// /api/resources/{w}/insights are one collection).
func collectionTemplate(path string) string {
	segs := strings.Split(strings.TrimPrefix(path, "/api/"), "/")
	out := segs[:0:0]
	for i := 0; i < len(segs); i++ {
		if (segs[i] == "workspaces" || segs[i] == "resources") && i+1 < len(segs) && segs[i+1] == "{workspace}" {
			i++
			continue
		}
		out = append(out, segs[i])
	}
	return strings.Join(out, "/")
}

func isParam(seg string) bool { return strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") }

func lastSeg(path string) string { return path[strings.LastIndexByte(path, '/')+1:] }

func parentPath(path string) string { return path[:strings.LastIndexByte(path, '/')] }

// classify decides the engine kind of a route from its method and shape
// and the other routes on the same path.
func classify(r Route, byPath map[string][]string, itemParents map[string]bool) engineKind {
	last := lastSeg(r.Path)
	param := isParam(last)
	methods := byPath[r.Path]
	switch r.Method {
	case http.MethodGet:
		if param {
			return engGet
		}
		if slices.Contains(methods, "PUT") || slices.Contains(methods, "PATCH") {
			return engSingletonGet
		}
		return engList
	case http.MethodPost:
		if !param && (slices.Contains(methods, "GET") || itemParents[r.Path]) {
			return engCreate
		}
		// A typed operation that stores a body and answers 201 creates a
		// record (collaboration events, context corrections, ...).
		if !param && !r.Placeholder && r.Body != nil && slices.Contains(r.Success, http.StatusCreated) {
			return engCreate
		}
		return engAction
	case http.MethodPut:
		if param {
			return engReplace
		}
		return engSingletonPut
	case http.MethodPatch:
		if param {
			return engMerge
		}
		return engSingletonMerge
	case http.MethodDelete:
		return engDelete
	}
	return engNone
}

// parentCheck is the record a nested route hangs from, to answer 404 when
// it does not exist.
type parentCheck struct {
	prefix string // route path up to and including the parent's param
	param  string
}

// findParent returns the nearest enclosing item of a route whose
// collection is created through the engine, ignoring the route's own item.
func findParent(r Route, creatable map[string]bool) *parentCheck {
	segs := strings.Split(r.Path, "/")
	end := len(segs)
	if isParam(segs[end-1]) {
		end--
	}
	for i := end - 1; i > 0; i-- {
		if !isParam(segs[i]) || segs[i] == "{workspace}" {
			continue
		}
		prefix := strings.Join(segs[:i], "/")
		if creatable[collectionTemplate(prefix)] {
			return &parentCheck{prefix: prefix, param: strings.Trim(segs[i], "{}")}
		}
		return nil
	}
	return nil
}

// instantiate fills the {params} of a template from the request.
func instantiate(c *call, tmpl string) string {
	segs := strings.Split(tmpl, "/")
	for i, s := range segs {
		if isParam(s) {
			segs[i] = c.r.PathValue(strings.Trim(s, "{}"))
		}
	}
	return strings.Join(segs, "/")
}

// classifyAll sets the engine kind of every route of a table.
func classifyAll(routes []Route) {
	byPath := map[string][]string{}
	itemParents := map[string]bool{}
	for _, r := range routes {
		byPath[r.Path] = append(byPath[r.Path], r.Method)
		if isParam(lastSeg(r.Path)) {
			itemParents[parentPath(r.Path)] = true
		}
	}
	for i := range routes {
		routes[i].engine = classify(routes[i], byPath, itemParents)
	}
}

// bind attaches a handler to every route: a specific one where the route
// has semantics of its own, else the record engine.
func (s *Server) bind() error {
	specific := s.handlers()
	creatable := map[string]bool{}
	for i := range s.routes {
		r := &s.routes[i]
		if r.engine == engCreate {
			creatable[collectionTemplate(r.Path)] = true
		}
	}
	byID := map[string]*Route{}
	for i := range s.routes {
		r := &s.routes[i]
		byID[r.OperationID] = r
		if r.TwinOf != "" {
			continue
		}
		id := r.OperationID
		if r.AliasOf != "" {
			id = r.AliasOf
		}
		if h, ok := specific[id]; ok {
			r.handler = h
			continue
		}
		if r.Auth == AuthPublic {
			return fmt.Errorf("bind %s: a public route needs its own handler", r.key())
		}
		r.handler = s.engineHandler(*r, findParent(*r, creatable))
	}
	// A twin (and an alias of a twin) runs its typed operation's handler.
	for i := range s.routes {
		r := &s.routes[i]
		if r.TwinOf == "" {
			continue
		}
		t, ok := byID[r.TwinOf]
		if !ok || t.handler == nil {
			return fmt.Errorf("bind %s: twin %s has no handler", r.key(), r.TwinOf)
		}
		r.handler, r.engine = t.handler, t.engine
	}
	return nil
}

// successStatus picks the status an engine route answers with.
func successStatus(r Route, k engineKind) int {
	want := http.StatusOK
	if k == engCreate {
		want = http.StatusCreated
	}
	if slices.Contains(r.Success, want) || len(r.Success) == 0 {
		return want
	}
	return r.Success[0]
}

func (s *Server) engineHandler(r Route, parent *parentCheck) handlerFunc {
	kind := r.engine
	status := successStatus(r, kind)
	var coll string
	switch kind {
	case engGet, engReplace, engMerge, engDelete:
		coll = collectionTemplate(parentPath(r.Path))
	case engAction:
		coll = collectionTemplate(r.Path)
	default:
		coll = collectionTemplate(r.Path)
	}
	itemParam := strings.Trim(lastSeg(r.Path), "{}")
	return func(c *call) (int, any, error) {
		if parent != nil {
			pc := collectionTemplate(parent.prefix)
			if _, err := c.s.st.Record(c.ctx(), c.workspaceID(), instantiate(c, pc), c.r.PathValue(parent.param)); err != nil {
				if errors.Is(err, store.ErrNotFound) {
					return 0, nil, notFound("%s %q does not exist", parent.param, c.r.PathValue(parent.param))
				}
				return 0, nil, err
			}
		}
		collection := instantiate(c, coll)
		switch kind {
		case engList:
			return c.listRecords(collection, status)
		case engCreate:
			rec, err := c.createRecord(collection, "", c.body)
			if err != nil {
				return 0, nil, err
			}
			return status, sdk.RecordResponse{Data: rec}, nil
		case engGet:
			rec, err := c.getRecord(collection, c.r.PathValue(itemParam))
			if err != nil {
				return 0, nil, err
			}
			return status, sdk.RecordResponse{Data: rec}, nil
		case engReplace, engMerge:
			rec, err := c.writeRecord(collection, c.r.PathValue(itemParam), kind == engMerge)
			if err != nil {
				return 0, nil, err
			}
			return status, sdk.RecordResponse{Data: rec}, nil
		case engDelete:
			rec, err := c.deleteRecord(collection, c.r.PathValue(itemParam))
			if err != nil {
				return 0, nil, err
			}
			return status, sdk.RecordResponse{Data: rec}, nil
		case engSingletonGet:
			rec, err := c.s.st.RecordByKey(c.ctx(), c.workspaceID(), collection, singletonKey)
			if errors.Is(err, store.ErrNotFound) {
				// Nothing stored yet: the singleton exists with no attributes.
				return status, sdk.RecordResponse{Data: sdk.Record{Collection: collection, WorkspaceID: c.workspaceID(), Attributes: map[string]any{}}}, nil
			}
			if err != nil {
				return 0, nil, err
			}
			out, err := toSDK(rec)
			return status, sdk.RecordResponse{Data: out}, err
		case engSingletonPut, engSingletonMerge:
			rec, err := c.upsertSingleton(collection, kind == engSingletonMerge)
			if err != nil {
				return 0, nil, err
			}
			return status, sdk.RecordResponse{Data: rec}, nil
		case engAction:
			rec, err := c.recordAction(collection, lastLiteral(r.Path), c.body)
			if err != nil {
				return 0, nil, err
			}
			return status, sdk.RecordResponse{Data: rec}, nil
		}
		return 0, nil, fmt.Errorf("engine: no behaviour for %s", r.key())
	}
}

func lastLiteral(path string) string {
	segs := strings.Split(path, "/")
	for i := len(segs) - 1; i >= 0; i-- {
		if !isParam(segs[i]) {
			return segs[i]
		}
	}
	return ""
}

// ---- record operations shared by the engine and typed handlers ----

func toSDK(r store.Record) (sdk.Record, error) {
	attrs := map[string]any{}
	if len(r.Attributes) > 0 {
		if err := json.Unmarshal(r.Attributes, &attrs); err != nil {
			return sdk.Record{}, fmt.Errorf("decode record %s: %w", r.ID, err)
		}
	}
	return sdk.Record{ID: r.ID, Collection: r.Collection, WorkspaceID: r.WorkspaceID, Seq: r.Seq, Attributes: attrs, CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}, nil
}

func (c *call) audit(action, target string, detail any) store.AuditEntry {
	e := store.AuditEntry{WorkspaceID: c.workspaceID(), Actor: c.p.Actor(), Action: action, Target: target, CreatedAt: c.now()}
	if c.p.Kind == auth.KindWebhook {
		detail = withDelivery(detail, c.p.DeliveryID)
	}
	if detail != nil {
		if b, err := json.Marshal(detail); err == nil {
			e.Detail = b
		}
	}
	return e
}

// withDelivery adds the delivery id to an audit detail written on behalf of
// a webhook delivery, so the entry leads back to what the provider sent.
// A detail that is not a JSON object is kept as it is.
func withDelivery(detail any, deliveryID string) any {
	switch d := detail.(type) {
	case nil:
		return map[string]any{"delivery_id": deliveryID}
	case map[string]any:
		out := make(map[string]any, len(d)+1)
		for k, v := range d {
			out[k] = v
		}
		if _, taken := out["delivery_id"]; !taken {
			out["delivery_id"] = deliveryID
		}
		return out
	}
	return detail
}

func (c *call) listRecords(collection string, status int) (int, any, error) {
	limit := int(queryInt(c, "limit", 100))
	recs, err := c.s.st.Records(c.ctx(), c.workspaceID(), collection, store.ListOptions{After: queryInt(c, "after", 0), Limit: limit})
	if err != nil {
		return 0, nil, err
	}
	return status, c.collection(recs, limit), nil
}

func (c *call) collection(recs []store.Record, limit int) sdk.RecordCollectionResponse {
	out := sdk.RecordCollectionResponse{Data: make([]sdk.Record, 0, len(recs))}
	for _, r := range recs {
		sr, err := toSDK(r)
		if err != nil {
			continue
		}
		out.Data = append(out.Data, sr)
	}
	out.Meta.Count = len(out.Data)
	if limit > 0 && len(recs) == limit {
		out.Meta.NextAfter = recs[len(recs)-1].Seq
	}
	return out
}

func (c *call) createRecord(collection, key string, attrs map[string]any) (sdk.Record, error) {
	return c.createRecordChecked(collection, key, attrs, nil)
}

// createRecordChecked creates a record if check, run in the store's write
// transaction, approves (see store.CreateRecordChecked).
func (c *call) createRecordChecked(collection, key string, attrs map[string]any, check func(store.RecordReader) error) (sdk.Record, error) {
	if attrs == nil {
		attrs = map[string]any{}
	}
	b, err := json.Marshal(attrs)
	if err != nil {
		return sdk.Record{}, err
	}
	now := c.now()
	rec := store.Record{WorkspaceID: c.workspaceID(), Collection: collection, NaturalKey: key, Attributes: b, CreatedBy: c.p.Actor(), CreatedAt: now, UpdatedAt: now}
	rec.ID = newRecordID()
	if err := c.s.st.CreateRecordChecked(c.ctx(), &rec, check, c.audit("record.create", collection+"/"+rec.ID, nil)); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return sdk.Record{}, errorf(http.StatusConflict, sdk.CodeConflict, "a record with this key already exists in %s", collection)
		}
		return sdk.Record{}, err
	}
	return toSDK(rec)
}

func (c *call) getRecord(collection, id string) (sdk.Record, error) {
	rec, err := c.s.st.Record(c.ctx(), c.workspaceID(), collection, id)
	if errors.Is(err, store.ErrNotFound) {
		return sdk.Record{}, notFound("no record %q in %s", id, collection)
	}
	if err != nil {
		return sdk.Record{}, err
	}
	return toSDK(rec)
}

// writeRecord replaces (PUT) or merges (PATCH, RFC 7396 style: null
// deletes a member) the attributes of a record.
func (c *call) writeRecord(collection, id string, merge bool) (sdk.Record, error) {
	action := "record.replace"
	if merge {
		action = "record.merge"
	}
	rec, err := c.s.st.UpdateRecordIf(c.ctx(), c.workspaceID(), collection, id, func(r *store.Record) error {
		attrs := map[string]any{}
		if merge {
			if err := json.Unmarshal(r.Attributes, &attrs); err != nil {
				return err
			}
			mergePatch(attrs, c.body)
		} else {
			attrs = c.body
		}
		b, err := json.Marshal(attrs)
		if err != nil {
			return err
		}
		r.Attributes, r.UpdatedAt = b, c.now()
		return nil
	}, c.audit(action, collection+"/"+id, nil))
	if errors.Is(err, store.ErrNotFound) {
		return sdk.Record{}, notFound("no record %q in %s", id, collection)
	}
	if err != nil {
		return sdk.Record{}, err
	}
	return toSDK(rec)
}

func mergePatch(dst, patch map[string]any) {
	for k, v := range patch {
		if v == nil {
			delete(dst, k)
			continue
		}
		if pm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				mergePatch(dm, pm)
				continue
			}
		}
		dst[k] = v
	}
}

func (c *call) deleteRecord(collection, id string) (sdk.Record, error) {
	rec, err := c.getRecord(collection, id)
	if err != nil {
		return sdk.Record{}, err
	}
	if err := c.s.st.DeleteRecord(c.ctx(), c.workspaceID(), collection, id, c.audit("record.delete", collection+"/"+id, nil)); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return sdk.Record{}, notFound("no record %q in %s", id, collection)
		}
		return sdk.Record{}, err
	}
	return rec, nil
}

func (c *call) upsertSingleton(collection string, merge bool) (sdk.Record, error) {
	cur, err := c.s.st.RecordByKey(c.ctx(), c.workspaceID(), collection, singletonKey)
	if errors.Is(err, store.ErrNotFound) {
		rec, err := c.createRecord(collection, singletonKey, c.body)
		var ae *apiError
		if errors.As(err, &ae) && ae.Status == http.StatusConflict {
			return c.upsertSingleton(collection, merge) // lost a race with another creator
		}
		return rec, err
	}
	if err != nil {
		return sdk.Record{}, err
	}
	return c.writeRecord(collection, cur.ID, merge)
}

// recordAction stores an audited action on its target.
func (c *call) recordAction(collection, action string, input map[string]any) (sdk.Record, error) {
	if input == nil {
		input = map[string]any{}
	}
	attrs := map[string]any{"action": action, "target": actionTarget(collection), "input": input, "status": "recorded"}
	b, err := json.Marshal(attrs)
	if err != nil {
		return sdk.Record{}, err
	}
	now := c.now()
	rec := store.Record{ID: newRecordID(), WorkspaceID: c.workspaceID(), Collection: collection, Attributes: b, CreatedBy: c.p.Actor(), CreatedAt: now, UpdatedAt: now}
	if err := c.s.st.CreateRecord(c.ctx(), &rec, c.audit("action."+action, collection+"/"+rec.ID, input)); err != nil {
		return sdk.Record{}, err
	}
	return toSDK(rec)
}

// actionTarget is the collection path an action applies to.
func actionTarget(collection string) string {
	if i := strings.LastIndexByte(collection, '/'); i >= 0 {
		return collection[:i]
	}
	return ""
}
