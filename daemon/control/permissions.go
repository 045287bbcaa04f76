package control

import (
	"context"
	"errors"
	"io"
	"net/http"

	"reeve.dev/reeve/daemon/wire"
)

// Permissions is what the hook bridge's routes and requests ask of the
// session manager.
type Permissions interface {
	Hook(ctx context.Context, sessionID string, payload []byte) (wire.HookAnswer, error)
	Pending(sessionID string) []wire.PermissionRequest
	RespondPermission(ctx context.Context, req wire.RespondPermissionRequest) (wire.PermissionDecision, error)
	SetMode(ctx context.Context, req wire.SetModeRequest) error
}

// hook serves `reeve hook`: the body is the agent's hook input, the answer
// its decision. A PreToolUse call blocks until the tool use is decided; if
// the hook goes away meanwhile, the request is denied and withdrawn.
func (a *API) hook(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, wire.CodeInvalid, "hook input over 1 MiB")
		return
	}
	ans, err := a.opts.Permissions.Hook(r.Context(), r.PathValue("id"), body)
	if err != nil {
		var ce codedError
		code := "internal"
		if errors.As(err, &ce) {
			code = ce.ErrorCode()
		}
		status := http.StatusInternalServerError
		switch code {
		case wire.CodeNotFound:
			status = http.StatusNotFound
		case wire.CodeBadFrame:
			status = http.StatusUnprocessableEntity
		case wire.CodeNotRunning, wire.CodeSessionMismatch:
			status = http.StatusConflict
		}
		writeError(w, status, code, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, ans)
}

func (a *API) listPermissions(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, wire.PermissionList{Pending: a.opts.Permissions.Pending(r.URL.Query().Get("session"))})
}
