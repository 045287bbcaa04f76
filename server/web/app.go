package web

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"sort"
	"time"

	"reeve.dev/reeve/server/sdk"
)

// The steering pages: home (machines and sessions), a machine (its live
// sessions and launch) and a session (live events, permissions, controls,
// worktree). Lists the control plane holds are rendered here through the
// API; everything that touches a daemon runs in the page's script, end to
// end encrypted, so the server renders no prompt or event of a live
// session.

// machineView is an install as the pages show it.
type machineView struct {
	sdk.Install
	Online   bool
	LastSeen string
}

// sessionView is a synced session record as the pages show it.
type sessionView struct {
	ID, Title, Status, Agent, Directory, InstallID, DaemonSessionID, Machine, Updated string
}

type workspaceView struct {
	sdk.Workspace
	Machines []machineView
	Sessions []sessionView
	Error    string
}

type appPage struct {
	page
	Workspaces []workspaceView
	Workspace  sdk.Workspace
	Machine    *machineView
	SessionID  string
	RelayURL   string
}

func ago(t *time.Time, now time.Time) string {
	if t == nil {
		return "never"
	}
	d := now.Sub(*t)
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return plural(int(d/time.Minute), "minute") + " ago"
	case d < 48*time.Hour:
		return plural(int(d/time.Hour), "hour") + " ago"
	}
	return t.UTC().Format("2006-01-02 15:04 UTC")
}

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return itoa(n) + " " + unit + "s"
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

func str(a map[string]any, k string) string {
	s, _ := a[k].(string)
	return s
}

// machines lists a workspace's installs with their presence.
func (h *Handler) machines(r *http.Request, c *sdk.Client, ws string) ([]machineView, error) {
	ins, err := c.ListInstalls(r.Context(), ws)
	if err != nil {
		return nil, err
	}
	now := h.opts.Now()
	out := make([]machineView, 0, len(ins))
	for _, in := range ins {
		mv := machineView{Install: in, LastSeen: ago(in.LastSeenAt, now)}
		if h.opts.Online != nil {
			mv.Online = h.opts.Online(ws, in.ID)
		}
		out = append(out, mv)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Online && !out[j].Online })
	return out, nil
}

func (h *Handler) sessions(r *http.Request, c *sdk.Client, ws string, names map[string]string) ([]sessionView, error) {
	recs, err := c.ListRecords(r.Context(), "/api/resources/"+url.PathEscape(ws)+"/sessions?limit=50")
	if err != nil {
		return nil, err
	}
	now := h.opts.Now()
	out := make([]sessionView, 0, len(recs))
	for _, rec := range recs {
		a := rec.Attributes
		up := rec.UpdatedAt
		sv := sessionView{ID: rec.ID, Title: str(a, "title"), Status: str(a, "status"), Agent: str(a, "agent"), Directory: str(a, "directory_name"),
			InstallID: str(a, "install_id"), DaemonSessionID: str(a, "daemon_session_id"), Updated: ago(&up, now)}
		sv.Machine = names[sv.InstallID]
		if sv.Title == "" {
			sv.Title = rec.ID
		}
		out = append(out, sv)
	}
	// Newest first.
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

// homePage is / for a signed-in person: each workspace's machines and
// sessions.
func (h *Handler) homePage(w http.ResponseWriter, r *http.Request) {
	if h.session(r) == "" {
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	s, ws, ok := h.signedIn(w, r)
	if !ok {
		return
	}
	c := h.client(r, s)
	p := appPage{page: page{Title: "Machines and sessions", SignedIn: true, CSRF: csrfFor(s)}}
	// An accepted invitation lands here.
	h.takeFlash(w, r, s).apply(&p.page)
	for _, wsp := range ws {
		v := workspaceView{Workspace: wsp}
		ms, err := h.machines(r, c, wsp.ID)
		if err != nil {
			v.Error = "The machines of this workspace could not be listed."
			h.opts.Logger.Warn("list installs", "workspace", wsp.ID, "err", err)
		}
		v.Machines = ms
		names := map[string]string{}
		for _, m := range ms {
			names[m.ID] = m.Name
		}
		ss, err := h.sessions(r, c, wsp.ID, names)
		if err != nil {
			v.Error = "The sessions of this workspace could not be listed."
			h.opts.Logger.Warn("list sessions", "workspace", wsp.ID, "err", err)
		}
		v.Sessions = ss
		p.Workspaces = append(p.Workspaces, v)
	}
	h.render(w, r, http.StatusOK, "home.html", p)
}

// machineFor loads the workspace and install of a steering page, or
// renders why not.
func (h *Handler) machineFor(w http.ResponseWriter, r *http.Request) (appPage, bool) {
	s, ws, ok := h.signedIn(w, r)
	if !ok {
		return appPage{}, false
	}
	p := appPage{page: page{SignedIn: true, CSRF: csrfFor(s)}, RelayURL: h.opts.RelayURL}
	wid, iid := r.PathValue("workspace"), r.PathValue("install")
	found := false
	for _, x := range ws {
		if x.ID == wid {
			p.Workspace, found = x, true
		}
	}
	if !found {
		p.Title, p.Error = "Not found", "You are not a member of this workspace, or it does not exist."
		h.render(w, r, http.StatusNotFound, "message.html", p)
		return p, false
	}
	in, err := h.client(r, s).GetInstall(r.Context(), wid, iid)
	if err != nil {
		p.Title, p.Error = "Not found", "This machine is not paired to the workspace (it may have been detached or paired again)."
		h.render(w, r, statusOr(err, http.StatusBadGateway), "message.html", p)
		return p, false
	}
	mv := machineView{Install: in, LastSeen: ago(in.LastSeenAt, h.opts.Now())}
	if h.opts.Online != nil {
		mv.Online = h.opts.Online(wid, iid)
	}
	p.Machine = &mv
	if in.AnchorPublicKey == "" {
		p.Title, p.Error = in.Name, "This machine was registered without pairing, so it has no trust anchor: it cannot be steered end to end. Pair it with `reeve pair`."
		h.render(w, r, http.StatusConflict, "message.html", p)
		return p, false
	}
	return p, true
}

func (h *Handler) machinePage(w http.ResponseWriter, r *http.Request) {
	p, ok := h.machineFor(w, r)
	if !ok {
		return
	}
	p.Title = p.Machine.Name
	h.render(w, r, http.StatusOK, "machine.html", p)
}

func (h *Handler) sessionPage(w http.ResponseWriter, r *http.Request) {
	p, ok := h.machineFor(w, r)
	if !ok {
		return
	}
	p.SessionID = r.PathValue("session")
	p.Title = "Session"
	h.render(w, r, http.StatusOK, "session.html", p)
}

// scriptCall opens a JSON endpoint called by the page's own script: it
// sets the content type and answers with the refusal itself unless the
// caller is signed in and sent this session's CSRF token in a header from
// this site, which another site can neither do nor read the answer of.
func (h *Handler) scriptCall(w http.ResponseWriter, r *http.Request) (string, bool) {
	w.Header().Set("Content-Type", "application/json")
	session := h.session(r)
	if session == "" {
		jsonFail(w, http.StatusUnauthorized, "sign in again")
		return "", false
	}
	if !sameOrigin(r) || !tokenEqual(r.Header.Get("X-Reeve-CSRF"), csrfFor(session)) {
		jsonFail(w, http.StatusForbidden, "this request was not sent from this site's page; reload the page")
		return "", false
	}
	return session, true
}

// jsonFail answers a script's call with an error it can show.
func jsonFail(w http.ResponseWriter, status int, msg string) {
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// signInEnded tells a script the API no longer knows its session, and
// drops the cookie so the next page asks for a sign-in.
func signInEnded(w http.ResponseWriter, r *http.Request) {
	clearCookie(w, r, SessionCookie)
	jsonFail(w, http.StatusUnauthorized, "your sign-in has ended; sign in again")
}

// relayTokenJSON gives the page's script a client relay JWT, minted by
// the API as the signed-in person, without the script ever holding the
// HttpOnly session token. It is a POST with the CSRF token in a header,
// so another site can neither call it nor read its answer.
func (h *Handler) relayTokenJSON(w http.ResponseWriter, r *http.Request) {
	s, ok := h.scriptCall(w, r)
	if !ok {
		return
	}
	var req struct {
		Workspace string `json:"workspace"`
		// Target asks for the daemon's access token for that machine too.
		Target string `json:"runtime_target_id"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil || req.Workspace == "" {
		jsonFail(w, http.StatusUnprocessableEntity, "name the workspace")
		return
	}
	var out sdk.RelayTokenResponse
	body := map[string]any{}
	if req.Target != "" {
		body["runtime_target_id"] = req.Target
	}
	_, err := h.client(r, s).Do(r.Context(), http.MethodPost, "/api/workspaces/"+url.PathEscape(req.Workspace)+"/relay-token", body, &out)
	if err != nil {
		var ae *sdk.APIError
		if errors.As(err, &ae) {
			switch ae.Status {
			case http.StatusUnauthorized:
				signInEnded(w, r)
			case http.StatusForbidden, http.StatusNotFound:
				jsonFail(w, http.StatusForbidden, "you may not reach machines of this workspace: "+ae.Body.Message)
			default:
				jsonFail(w, http.StatusBadGateway, "the server could not issue a relay token: "+ae.Body.Message)
			}
			return
		}
		jsonFail(w, http.StatusBadGateway, "the server could not issue a relay token")
		return
	}
	// expires_in lets the page refresh the access token in time whatever
	// its clock says.
	json.NewEncoder(w).Encode(map[string]any{"token": out.Data.Token, "expires_at": out.Data.ExpiresAt, "expires_in": int(out.Data.ExpiresAt.Sub(h.opts.Now()).Seconds()),
		"relay_url": out.Data.RelayURL, "access_token": out.Data.AccessToken})
}

// machinesJSON lists, for the signed-in person, the paired machines of
// each of their workspaces with their anchors and presence: what every
// page's notifier (static/notify.js) needs to open a channel to each
// online machine and hear the permission requests its person may decide.
// It needs the CSRF header too, so only this site's pages read it.
func (h *Handler) machinesJSON(w http.ResponseWriter, r *http.Request) {
	s, ok := h.scriptCall(w, r)
	if !ok {
		return
	}
	c := h.client(r, s)
	wss, err := c.ListWorkspaces(r.Context())
	if err != nil {
		if status(err) == http.StatusUnauthorized {
			signInEnded(w, r)
			return
		}
		jsonFail(w, http.StatusBadGateway, "the workspaces could not be listed")
		return
	}
	type machine struct {
		Workspace   string `json:"workspace"`
		Install     string `json:"install"`
		Name        string `json:"name"`
		Anchor      string `json:"anchor"`
		Fingerprint string `json:"fingerprint"`
		Online      bool   `json:"online"`
	}
	out := []machine{}
	for _, ws := range wss {
		ms, err := h.machines(r, c, ws.ID)
		if err != nil {
			h.opts.Logger.Warn("list installs", "workspace", ws.ID, "err", err)
			continue
		}
		for _, m := range ms {
			if m.AnchorPublicKey == "" {
				continue // registered without pairing: no channel to open
			}
			out = append(out, machine{Workspace: ws.ID, Install: m.ID, Name: m.Name, Anchor: m.AnchorPublicKey, Fingerprint: m.AnchorFingerprint, Online: m.Online})
		}
	}
	json.NewEncoder(w).Encode(map[string]any{"machines": out, "relay_url": h.opts.RelayURL})
}

// connectSrc is the CSP connect-src: the origin, and the relay's when it
// is elsewhere.
func connectSrc(relayURL string) string {
	src := "'self'"
	u, err := url.Parse(relayURL)
	if err != nil || u.Host == "" {
		return src
	}
	switch u.Scheme {
	case "http", "ws":
		src += " ws://" + u.Host
	case "https", "wss":
		src += " wss://" + u.Host
	}
	return src
}
