package control

import (
	"bufio"
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
	id, after, ok := a.sessionAfter(w, r)
	if !ok {
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

// streamPage is how many events streamEvents reads per query: a reader
// connection is held only that long, so a slow client never pins the log.
const streamPage = 4096

// streamEvents is a session's log after after_seq, up to until_seq (all of
// it when absent), as one response: a session-update frame a line
// (wire.SessionLogMediaType), encoded once here and copied through by the
// client. It is what `logs --json` prints; a million events are one
// request rather than a thousand pages. The frames are exactly
// until_seq-after_seq lines when the log holds that much (seqs have no
// gaps), so a client can tell a cut stream from a whole one.
func (a *API) streamEvents(w http.ResponseWriter, r *http.Request) {
	id, after, ok := a.sessionAfter(w, r)
	if !ok {
		return
	}
	until, err := intParam(r, "until_seq", 0)
	if err != nil || until < 0 {
		writeError(w, http.StatusUnprocessableEntity, wire.CodeInvalid, "until_seq must be a non-negative integer")
		return
	}
	w.Header().Set("Content-Type", wire.SessionLogMediaType)
	w.Header().Set("Cache-Control", "no-store")
	bw := bufio.NewWriterSize(w, 256<<10)
	var line []byte
	for until == 0 || after < until {
		evs, err := a.opts.Log.Events(r.Context(), id, after, streamPage)
		if err != nil {
			// The status line is gone; a short stream is how the client
			// learns (it counts the lines it expected).
			return
		}
		for _, e := range evs {
			if until > 0 && e.Seq > until {
				break
			}
			line = append(wire.AppendSessionUpdate(line[:0], e.SessionID, e.Seq, e.TS, e.Kind, e.Data), '\n')
			if _, err := bw.Write(line); err != nil {
				return
			}
			after = e.Seq
		}
		if len(evs) < streamPage {
			break
		}
	}
	bw.Flush()
}

// sessionAfter resolves the two reads' common inputs: the session of the
// path, which must exist, and after_seq. It answers the error itself and
// reports false when either is wrong.
func (a *API) sessionAfter(w http.ResponseWriter, r *http.Request) (id string, after int64, ok bool) {
	id = r.PathValue("id")
	if _, err := a.opts.Sessions.Session(r.Context(), id); err != nil {
		writeSessionError(w, err)
		return "", 0, false
	}
	after, err := intParam(r, "after_seq", 0)
	if err != nil || after < 0 {
		writeError(w, http.StatusUnprocessableEntity, wire.CodeInvalid, "after_seq must be a non-negative integer")
		return "", 0, false
	}
	return id, after, true
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
