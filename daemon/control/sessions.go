package control

import (
	"errors"
	"net/http"
	"strconv"

	"reeve.dev/reeve/daemon/wire"
)

// maxEventPage bounds one page of GET /api/sessions/{id}/events.
const maxEventPage = 10000

func (a *API) getSession(w http.ResponseWriter, r *http.Request) {
	si, err := a.opts.Sessions.Session(r.Context(), r.PathValue("id"))
	if err != nil {
		writeSessionError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, si)
}

func (a *API) getManifest(w http.ResponseWriter, r *http.Request) {
	m, err := a.opts.Sessions.Manifest(r.Context(), r.PathValue("id"))
	if err != nil {
		writeSessionError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, m)
}

// listEvents is a one-shot read of a session's log after a seq: the
// non-following `logs`, and a backfill for clients that reconnect.
func (a *API) listEvents(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := a.opts.Sessions.Session(r.Context(), id); err != nil {
		writeSessionError(w, err)
		return
	}
	after, err := intParam(r, "after_seq", 0)
	if err != nil || after < 0 {
		writeError(w, http.StatusUnprocessableEntity, wire.CodeInvalid, "after_seq must be a non-negative integer")
		return
	}
	limit, err := intParam(r, "limit", 1000)
	if err != nil || limit < 1 || limit > maxEventPage {
		writeError(w, http.StatusUnprocessableEntity, wire.CodeInvalid, "limit must be an integer from 1 to 10000")
		return
	}
	evs, err := a.opts.Log.Events(r.Context(), id, after, int(limit))
	if err != nil {
		writeError(w, http.StatusInternalServerError, wire.CodeInternal, err.Error())
		return
	}
	out := wire.EventPage{Events: make([]wire.SessionUpdate, 0, len(evs))}
	for _, e := range evs {
		out.Events = append(out.Events, wire.SessionUpdate{Type: wire.TypeSessionUpdate, SessionID: e.SessionID, Seq: e.Seq, TS: e.TS, Kind: e.Kind, Data: e.Data})
	}
	writeJSON(w, http.StatusOK, out)
}

func intParam(r *http.Request, name string, def int64) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	return strconv.ParseInt(v, 10, 64)
}

func writeSessionError(w http.ResponseWriter, err error) {
	var ce codedError
	if errors.As(err, &ce) && ce.ErrorCode() == wire.CodeNotFound {
		writeError(w, http.StatusNotFound, wire.CodeNotFound, err.Error())
		return
	}
	writeError(w, http.StatusInternalServerError, wire.CodeInternal, err.Error())
}
