package web

import (
	"errors"
	"net/http"
	"net/url"
	"strings"

	"reeve.dev/reeve/server/sdk"
)

// ---- /login ----

// loginCSRFToken returns the pre-sign-in double-submit token, setting its
// cookie when the browser has none.
func loginCSRFToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(loginCSRF); err == nil && len(c.Value) >= 32 {
		return c.Value
	}
	tok := randomToken()
	http.SetCookie(w, &http.Cookie{Name: loginCSRF, Value: tok, Path: "/login", HttpOnly: true, Secure: secure(r), SameSite: http.SameSiteStrictMode})
	return tok
}

// A login link opened in the browser shows a button rather than signing
// in on GET, so a link scanner cannot spend the code. What a sign-in form
// (or signing out) did arrives as a flash sealed under the login form's
// token, never as text in the address.
func (h *Handler) loginPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := page{Title: "Sign in", Next: safeNext(q.Get("next")), Code: q.Get("code"), SignedIn: h.session(r) != ""}
	if p.SignedIn {
		p.CSRF = csrfFor(h.session(r))
	}
	tok := loginCSRFToken(w, r)
	h.takeFlash(w, r, tok).apply(&p)
	h.renderLogin(w, r, http.StatusOK, p, tok)
}

// loginBack answers a sign-in form with a redirect to the sign-in page
// (keeping where to go after), leaving f for it under the form's token.
func (h *Handler) loginBack(w http.ResponseWriter, r *http.Request, tok, next string, f flash) {
	target := "/login"
	if next != "/" {
		target += "?next=" + url.QueryEscape(next)
	}
	h.redirectWith(w, r, tok, target, f)
}

func (h *Handler) renderLogin(w http.ResponseWriter, r *http.Request, status int, p page, tok string) {
	// The sign-in forms carry the pre-sign-in token; the sign-out form,
	// when signed in, the session's.
	p.Title = "Sign in"
	h.render(w, r, status, "login.html", struct {
		page
		LoginCSRF string
	}{p, tok})
}

func (h *Handler) loginSubmit(w http.ResponseWriter, r *http.Request) {
	p := page{Next: safeNext(r.PostFormValue("next"))}
	c, err := r.Cookie(loginCSRF)
	if !sameOrigin(r) || err != nil || !tokenEqual(r.PostFormValue("csrf"), c.Value) {
		p.Error = "This form was not sent from this site, or it is stale. Reload the page and try again."
		h.renderLogin(w, r, http.StatusForbidden, p, loginCSRFToken(w, r))
		return
	}
	tok := c.Value
	switch r.PostFormValue("action") {
	case "request":
		email := strings.TrimSpace(r.PostFormValue("email"))
		if !strings.Contains(email, "@") {
			h.loginBack(w, r, tok, p.Next, flash{Error: "Enter the email address of your account.", Form: map[string]string{"email": email}})
			return
		}
		if !h.links.allow(remoteHost(r), h.opts.Now()) {
			h.loginBack(w, r, tok, p.Next, flash{Error: "Too many login links requested from here. Wait a few minutes and try again.", Form: map[string]string{"email": email}})
			return
		}
		if h.opts.RequestLoginLink != nil {
			if err := h.opts.RequestLoginLink(r.Context(), email); err != nil {
				h.opts.Logger.Warn("login link request", "err", err)
			}
		}
		h.loginBack(w, r, tok, p.Next, flash{Notice: "If " + email + " has an account, a one-time login link for it is now in the server operator's console. Open it, or paste it below."})
	case "code":
		code := loginCode(r.PostFormValue("code"))
		if code == "" {
			h.loginBack(w, r, tok, p.Next, flash{Error: "Paste the login link or its code (it starts with rvl_)."})
			return
		}
		res, err := h.client(r, "").Login(r.Context(), code)
		if err != nil {
			msg := "That login link is unknown, already used or expired. Ask for a new one."
			if status(err) == http.StatusTooManyRequests {
				msg = "Too many attempts. Wait a minute and try again."
			}
			h.loginBack(w, r, tok, p.Next, flash{Error: msg})
			return
		}
		h.setSession(w, r, res)
		clearCookie(w, r, loginCSRF)
		http.Redirect(w, r, p.Next, http.StatusSeeOther)
	default:
		h.loginBack(w, r, tok, p.Next, flash{Error: "Unknown action."})
	}
}

// loginCode accepts a pasted login link or a bare code.
func loginCode(s string) string {
	s = strings.TrimSpace(s)
	if u, err := url.Parse(s); err == nil && u.Query().Get("code") != "" {
		s = u.Query().Get("code")
	}
	if !strings.HasPrefix(s, "rvl_") || strings.ContainsAny(s, " /?&") {
		return ""
	}
	return s
}

func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	s := h.session(r)
	if s == "" {
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	if !h.checkPost(w, r, s) {
		return
	}
	if err := h.client(r, s).Logout(r.Context()); err != nil && status(err) != http.StatusUnauthorized {
		h.opts.Logger.Warn("logout", "err", err)
	}
	clearCookie(w, r, SessionCookie)
	// The sign-in page says so from a flash under its form token (set
	// here when the browser has none yet).
	h.redirectWith(w, r, loginCSRFToken(w, r), "/login", flash{Notice: "You are signed out."})
}

// ---- /pair ----

// signedIn returns the session and the user's workspaces, or redirects to
// the sign-in page (clearing a session the API no longer accepts).
func (h *Handler) signedIn(w http.ResponseWriter, r *http.Request) (string, []sdk.Workspace, bool) {
	s := h.session(r)
	if s == "" {
		h.toLogin(w, r)
		return "", nil, false
	}
	ws, err := h.client(r, s).ListWorkspaces(r.Context())
	if status(err) == http.StatusUnauthorized {
		clearCookie(w, r, SessionCookie)
		h.toLogin(w, r)
		return "", nil, false
	}
	if err != nil {
		h.opts.Logger.Error("list workspaces", "err", err)
		h.render(w, r, http.StatusBadGateway, "message.html", page{Title: "Something went wrong", SignedIn: true, CSRF: csrfFor(s), Error: "The server could not list your workspaces. Try again."})
		return "", nil, false
	}
	return s, ws, true
}

// admins are the workspaces where the user may approve pairings.
func admins(ws []sdk.Workspace) []sdk.Workspace {
	var out []sdk.Workspace
	for _, w := range ws {
		if w.Role == sdk.RoleAdmin || w.Role == sdk.RoleOwner {
			out = append(out, w)
		}
	}
	return out
}

func workspaceName(ws []sdk.Workspace, id *string) string {
	if id == nil {
		return ""
	}
	for _, w := range ws {
		if w.ID == *id {
			return w.Name
		}
	}
	return *id
}

func (h *Handler) pairPage(w http.ResponseWriter, r *http.Request) {
	s, ws, ok := h.signedIn(w, r)
	if !ok {
		return
	}
	p := page{Title: "Pair a machine", SignedIn: true, CSRF: csrfFor(s), Workspaces: admins(ws)}
	fl := h.takeFlash(w, r, s)
	fl.apply(&p)
	code := strings.TrimSpace(r.URL.Query().Get("code"))
	if code == "" {
		if m := fl.Minted; m != nil {
			p.Minted, p.WorkspaceName = &sdk.PairingCode{Code: m.Code, ExpiresAt: m.ExpiresAt}, m.WorkspaceName
		}
		h.render(w, r, http.StatusOK, "pair_enter.html", p)
		return
	}
	p.Code = code
	pc, err := h.client(r, s).GetPairingCode(r.Context(), code)
	if err != nil {
		// A refused decision already says why; the code's own state
		// adds nothing then.
		if p.Error == "" {
			p.Error = pairingError(err)
		}
		h.render(w, r, statusOr(err, http.StatusBadGateway), "pair.html", p)
		return
	}
	p.Pairing, p.Code, p.WorkspaceName = &pc, pc.Code, workspaceName(ws, pc.WorkspaceID)
	// The decision just made shows as the result once; a reload shows the
	// code as it stands.
	if fl.Result == pc.State {
		p.Result = fl.Result
	}
	h.render(w, r, http.StatusOK, "pair.html", p)
}

var errNoDecision = errors.New("no decision")

// pairDecide approves or denies a code and answers with a redirect to
// the code's page (see flash.go), so a reload never decides again.
func (h *Handler) pairDecide(w http.ResponseWriter, r *http.Request) {
	s, _, ok := h.signedIn(w, r)
	if !ok || !h.checkPost(w, r, s) {
		return
	}
	code := strings.TrimSpace(r.PostFormValue("code"))
	req := sdk.PairingDecisionRequest{Workspace: r.PostFormValue("workspace")}
	c := h.client(r, s)
	var (
		pc  sdk.PairingCode
		err error
		fl  flash
	)
	switch r.PostFormValue("action") {
	case "approve":
		pc, err = c.ApprovePairingCode(r.Context(), code, req)
	case "deny":
		pc, err = c.DenyPairingCode(r.Context(), code, req)
	default:
		err = errNoDecision
	}
	switch {
	case err == errNoDecision:
		fl.Error = "Choose Approve or Deny."
	case err != nil:
		fl.Error = pairingError(err)
	default:
		fl.Result = pc.State
	}
	h.redirectWith(w, r, s, "/pair?code="+url.QueryEscape(code), fl)
}

// pairMint is the browser-minted initiation from the page; the code
// crosses the redirect to the pair page sealed in the flash.
func (h *Handler) pairMint(w http.ResponseWriter, r *http.Request) {
	s, ws, ok := h.signedIn(w, r)
	if !ok || !h.checkPost(w, r, s) {
		return
	}
	var fl flash
	pc, err := h.client(r, s).CreateWorkspacePairingCode(r.Context(), r.PostFormValue("workspace"), sdk.WorkspacePairingCodeRequest{})
	if err != nil {
		fl.Error = pairingError(err)
	} else {
		fl.Minted = &mintedCode{Code: pc.Code, ExpiresAt: pc.ExpiresAt, WorkspaceName: workspaceName(ws, pc.WorkspaceID)}
	}
	h.redirectWith(w, r, s, "/pair", fl)
}

// pairingError words an API refusal for a person.
func pairingError(err error) string {
	var ae *sdk.APIError
	if !errors.As(err, &ae) {
		return "The server could not be reached. Try again."
	}
	switch ae.Status {
	case http.StatusNotFound:
		if ae.Body.Code == sdk.CodeWorkspaceNotFound {
			return "That workspace does not exist."
		}
		return "There is no such pairing code. Check it against the one your machine shows."
	case http.StatusGone:
		return "This pairing code has expired. Run `reeve pair` on the machine again for a new one."
	case http.StatusConflict:
		return "This pairing code cannot be used now: " + ae.Body.Message
	case http.StatusForbidden:
		return "You may not do this: " + ae.Body.Message
	case http.StatusUnprocessableEntity:
		return "Choose the workspace to pair this machine to."
	case http.StatusTooManyRequests:
		return "Too many attempts. Wait a minute and try again."
	}
	return ae.Body.Message
}

func status(err error) int {
	var ae *sdk.APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

func statusOr(err error, def int) int {
	if s := status(err); s >= 400 {
		return s
	}
	return def
}

// invitePage shows an invitation's accept button to the signed-in user;
// the API decides whether the invitation is theirs. A refused accept
// comes back here with why, once.
func (h *Handler) invitePage(w http.ResponseWriter, r *http.Request) {
	s, _, ok := h.signedIn(w, r)
	if !ok {
		return
	}
	p := page{Title: "Join a workspace", SignedIn: true, CSRF: csrfFor(s), Code: r.URL.Query().Get("token")}
	h.takeFlash(w, r, s).apply(&p)
	if p.Code == "" {
		p.Error = "This link has no invitation in it. Open the whole link you were sent."
		h.render(w, r, http.StatusBadRequest, "message.html", p)
		return
	}
	if p.Error != "" {
		h.render(w, r, http.StatusOK, "message.html", p)
		return
	}
	h.render(w, r, http.StatusOK, "invite.html", p)
}

// inviteAccept answers with a redirect: to the home page, where the new
// workspace now is, once joined; back to the invitation with why when
// refused. A reload never accepts again.
func (h *Handler) inviteAccept(w http.ResponseWriter, r *http.Request) {
	s, _, ok := h.signedIn(w, r)
	if !ok || !h.checkPost(w, r, s) {
		return
	}
	token := r.PostFormValue("token")
	res, err := h.client(r, s).AcceptInvitation(r.Context(), token)
	if err != nil {
		var msg string
		switch status(err) {
		case http.StatusNotFound:
			msg = "This invitation link is not valid."
		case http.StatusGone:
			msg = "This invitation was already used, revoked or has expired. Ask for a new one."
		case http.StatusForbidden:
			msg = "This invitation is for another email address. Sign out and sign in as the invited address."
		case http.StatusConflict:
			msg = "You are already a member of this workspace."
		default:
			msg = "The invitation could not be accepted. Try again."
		}
		h.redirectWith(w, r, s, "/invite?token="+url.QueryEscape(token), flash{Error: msg})
		return
	}
	h.redirectWith(w, r, s, "/", flash{Notice: "You joined " + res.WorkspaceName + " as " + res.Role + "."})
}
