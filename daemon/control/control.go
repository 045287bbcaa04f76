// Package control serves the daemon's local API: GET /health, the
// directory, session and hook-bridge routes, and the control protocol on
// /ws (and on relayed channels, through ServeControl), whose requests are
// dispatched by one table (table.go). Every request passes the Host,
// Origin and token guard first.
package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"reeve.dev/reeve/daemon/store"
	"reeve.dev/reeve/daemon/wire"
)

// Directories is the part of the store the directory routes use.
type Directories interface {
	AddDirectory(ctx context.Context, path string) (store.Directory, bool, error)
	ListDirectories(ctx context.Context) ([]store.Directory, error)
	Directory(ctx context.Context, id string) (store.Directory, error)
	RemoveDirectory(ctx context.Context, id string) error
}

var _ Directories = (*store.Store)(nil)

// Options configure the local API.
type Options struct {
	Directories    Directories
	Health         func(ctx context.Context) wire.Health
	AllowedHosts   []string
	AllowedOrigins []string
	// BoundPort is the TCP port the listener is bound to; empty for a unix
	// socket. Loopback Host headers must name this port.
	BoundPort string
	// Token, when non-empty, is required as a bearer token on every route
	// except /health.
	Token string
	// Sessions, Log and Discover serve /ws and the session routes; nil
	// Sessions leaves them out.
	Sessions Sessions
	Log      EventLog
	Discover Discover
	// Permissions serves the hook bridge's routes and requests; nil leaves
	// them out.
	Permissions Permissions
	// Worktrees serves the worktree requests; nil leaves them out.
	Worktrees Worktrees
	DaemonID  string
	// Remote serves the local remote-control routes (remote.go); nil
	// leaves them out.
	Remote Remote
}

// maxBody bounds request bodies of the local API.
const maxBody = 1 << 20

// API is the local HTTP API.
type API struct {
	opts Options
	mux  *http.ServeMux
	h    http.Handler
	ws   *wsServer // nil without sessions
}

// New builds the local API.
func New(opts Options) *API {
	a := &API{opts: opts, mux: http.NewServeMux()}
	g := &guard{allowedHosts: opts.AllowedHosts, allowedOrigins: opts.AllowedOrigins, boundPort: opts.BoundPort}
	if opts.Token != "" {
		g.token = []byte(opts.Token)
	}
	a.mux.HandleFunc("/health", methods{http.MethodGet: a.health}.serve)
	a.mux.HandleFunc("/api/directories", methods{http.MethodGet: a.listDirectories, http.MethodPost: a.addDirectory}.serve)
	a.mux.HandleFunc("/api/directories/{id}", methods{http.MethodDelete: a.removeDirectory}.serve)
	if opts.Sessions != nil {
		a.ws = newWSServer(opts)
		a.mux.HandleFunc("/ws", methods{http.MethodGet: a.ws.ServeHTTP}.serve)
		a.mux.HandleFunc("/api/sessions/{id}", methods{http.MethodGet: a.getSession}.serve)
		a.mux.HandleFunc("/api/sessions/{id}/manifest", methods{http.MethodGet: a.getManifest}.serve)
		a.mux.HandleFunc("/api/sessions/{id}/events", methods{http.MethodGet: a.listEvents}.serve)
		a.mux.HandleFunc("/api/sessions/{id}/events/stream", methods{http.MethodGet: a.streamEvents}.serve)
	}
	if opts.Permissions != nil {
		a.mux.HandleFunc("/api/sessions/{id}/hooks", methods{http.MethodPost: a.hook}.serve)
		a.mux.HandleFunc("/api/permissions", methods{http.MethodGet: a.listPermissions}.serve)
	}
	if opts.Remote != nil {
		a.registerRemote(opts.Remote)
	}
	a.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, wire.CodeNotFound, "no route "+r.URL.Path)
	})
	a.h = g.wrap(a.mux)
	return a
}

// ServeHTTP implements http.Handler.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.h.ServeHTTP(w, r) }

// Stop tells every control-protocol connection, local or relayed, that the
// daemon is stopping (a daemon-stopping frame with reason), closes them,
// and answers later ones the same way. Followers can then say why they
// were cut off instead of reporting a broken connection.
func (a *API) Stop(reason string) {
	if a.ws != nil {
		a.ws.stop(reason)
	}
}

// methods dispatches by HTTP method so that a wrong method gets a JSON 405
// rather than the mux's plain-text one.
type methods map[string]http.HandlerFunc

func (m methods) serve(w http.ResponseWriter, r *http.Request) {
	if h, ok := m[r.Method]; ok {
		h(w, r)
		return
	}
	if r.Method == http.MethodHead {
		if h, ok := m[http.MethodGet]; ok {
			h(w, r)
			return
		}
	}
	writeError(w, http.StatusMethodNotAllowed, wire.CodeMethod, r.Method+" is not allowed on "+r.URL.Path)
}

func (a *API) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, a.opts.Health(r.Context()))
}

func (a *API) listDirectories(w http.ResponseWriter, r *http.Request) {
	dirs, err := a.opts.Directories.ListDirectories(r.Context())
	if err != nil {
		writeError(w, http.StatusInternalServerError, wire.CodeInternal, err.Error())
		return
	}
	out := wire.DirectoryList{Directories: make([]wire.Directory, 0, len(dirs))}
	for _, d := range dirs {
		out.Directories = append(out.Directories, toWire(d))
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) addDirectory(w http.ResponseWriter, r *http.Request) {
	var req wire.AddDirectoryRequest
	if err := decodeBody(w, r, &req); err != nil {
		writeError(w, http.StatusBadRequest, wire.CodeInvalid, err.Error())
		return
	}
	path, err := canonicalDir(req.Path)
	if err != nil {
		writeError(w, http.StatusUnprocessableEntity, wire.CodeInvalid, err.Error())
		return
	}
	d, created, err := a.opts.Directories.AddDirectory(r.Context(), path)
	if err != nil {
		writeError(w, http.StatusInternalServerError, wire.CodeInternal, err.Error())
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, wire.AddDirectoryResponse{Directory: toWire(d), Created: created})
}

func (a *API) removeDirectory(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	err := a.opts.Directories.RemoveDirectory(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, http.StatusNotFound, wire.CodeNotFound, "no directory with id "+quote(id))
		return
	}
	if errors.Is(err, store.ErrInUse) {
		writeError(w, http.StatusConflict, wire.CodeDirectoryInUse, err.Error())
		return
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, wire.CodeInternal, err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// canonicalDir checks that p is an absolute path to an existing directory and
// resolves symlinks, so one directory is registered once however it is named.
func canonicalDir(p string) (string, error) {
	if p == "" {
		return "", errors.New("path is required")
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("path %s is not absolute", quote(p))
	}
	real, err := filepath.EvalSymlinks(filepath.Clean(p))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("directory %s does not exist", quote(p))
		}
		return "", fmt.Errorf("resolve %s: %w", quote(p), err)
	}
	info, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("stat %s: %w", quote(p), err)
	}
	if !info.IsDir() {
		return "", fmt.Errorf("%s is not a directory", quote(p))
	}
	return real, nil
}

func toWire(d store.Directory) wire.Directory {
	return wire.Directory{ID: d.ID, Path: d.Path, AddedAt: d.AddedAt}
}

func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("invalid JSON body: %w", err)
	}
	if dec.More() {
		return errors.New("invalid JSON body: more than one value")
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, wire.ErrorBody{Error: wire.ErrorDetail{Code: code, Message: msg}})
}
