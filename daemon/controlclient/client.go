// Package controlclient is the client of a local daemon: its REST routes
// (health, directories, sessions, the hook bridge, remote control), and
// its control protocol at /ws as a transport of the one protocol client,
// daemon/wireclient, with a keepalive and reconnection through the home.
package controlclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"reeve.dev/reeve/daemon/home"
	"reeve.dev/reeve/daemon/wire"
)

// Options locate and authenticate against a daemon.
type Options struct {
	Network string // "tcp" or "unix"
	Address string // host:port or socket path
	Token   string // bearer token; empty sends none
	// Timeout bounds each request; zero means 10 seconds.
	Timeout time.Duration
}

// Client talks to one daemon.
type Client struct {
	opts Options
	base string
	http *http.Client
}

// ErrUnreachable wraps failures to connect to the daemon at all.
var ErrUnreachable = errors.New("daemon unreachable")

// APIError is an error answer of the local API.
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string { return e.Message }

// New builds a client.
func New(opts Options) *Client {
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second
	}
	tr := &http.Transport{MaxIdleConns: 4, IdleConnTimeout: 30 * time.Second}
	base := "http://" + dialAddress(opts.Address)
	if opts.Network == "unix" {
		sock := opts.Address
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}
		base = "http://localhost"
	}
	return &Client{opts: opts, base: base, http: &http.Client{Transport: tr, Timeout: opts.Timeout}}
}

// FromHome builds a client for the daemon running from dir, using its bound
// endpoint and its token. It fails with fs.ErrNotExist when no daemon has
// recorded an endpoint.
func FromHome(dir home.Dir, timeout time.Duration) (*Client, home.Endpoint, error) {
	ep, err := dir.ReadEndpoint()
	if err != nil {
		return nil, ep, err
	}
	tok, _ := dir.ReadToken() // a daemon without --auth ignores it
	return New(Options{Network: ep.Network, Address: ep.Address, Token: tok, Timeout: timeout}), ep, nil
}

// BaseURL is the daemon's HTTP origin as the client reaches it.
func (c *Client) BaseURL() string { return c.base }

// dialAddress turns a wildcard bind address into a loopback one: a daemon
// bound to 0.0.0.0 is still reached, and Host-checked, via loopback.
func dialAddress(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return net.JoinHostPort(host, port)
}

// Health calls GET /health.
func (c *Client) Health(ctx context.Context) (wire.Health, error) {
	var h wire.Health
	return h, c.do(ctx, http.MethodGet, "/health", nil, &h)
}

// ListDirectories calls GET /api/directories.
func (c *Client) ListDirectories(ctx context.Context) ([]wire.Directory, error) {
	var out wire.DirectoryList
	if err := c.do(ctx, http.MethodGet, "/api/directories", nil, &out); err != nil {
		return nil, err
	}
	return out.Directories, nil
}

// AddDirectory calls POST /api/directories with an absolute path.
func (c *Client) AddDirectory(ctx context.Context, path string) (wire.AddDirectoryResponse, error) {
	var out wire.AddDirectoryResponse
	return out, c.do(ctx, http.MethodPost, "/api/directories", wire.AddDirectoryRequest{Path: path}, &out)
}

// RemoveDirectory calls DELETE /api/directories/{id}.
func (c *Client) RemoveDirectory(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/api/directories/"+url.PathEscape(id), nil, nil)
}

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.opts.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.Token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%w at %s: %w", ErrUnreachable, c.where(), err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%w at %s: read response: %w", ErrUnreachable, c.where(), err)
	}
	if resp.StatusCode >= 300 {
		var eb wire.ErrorBody
		if json.Unmarshal(data, &eb) == nil && eb.Error.Message != "" {
			return &APIError{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message}
		}
		return &APIError{Status: resp.StatusCode, Code: "http_" + fmt.Sprint(resp.StatusCode), Message: strings.TrimSpace(string(data))}
	}
	if out == nil || len(data) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decode %s %s: %w", method, path, err)
	}
	return nil
}

func (c *Client) where() string {
	if c.opts.Network == "unix" {
		return "unix:" + c.opts.Address
	}
	return c.opts.Address
}

// Session calls GET /api/sessions/{id}.
func (c *Client) Session(ctx context.Context, id string) (wire.SessionInfo, error) {
	var si wire.SessionInfo
	return si, c.do(ctx, http.MethodGet, "/api/sessions/"+url.PathEscape(id), nil, &si)
}

// Manifest calls GET /api/sessions/{id}/manifest.
func (c *Client) Manifest(ctx context.Context, id string) (wire.Manifest, error) {
	var m wire.Manifest
	return m, c.do(ctx, http.MethodGet, "/api/sessions/"+url.PathEscape(id)+"/manifest", nil, &m)
}

// Events calls GET /api/sessions/{id}/events: up to limit events after
// afterSeq.
func (c *Client) Events(ctx context.Context, id string, afterSeq int64, limit int) ([]wire.SessionUpdate, error) {
	var page wire.EventPage
	path := fmt.Sprintf("/api/sessions/%s/events?after_seq=%d&limit=%d", url.PathEscape(id), afterSeq, limit)
	return page.Events, c.do(ctx, http.MethodGet, path, nil, &page)
}

// Hook calls POST /api/sessions/{id}/hooks with an agent's hook input.
func (c *Client) Hook(ctx context.Context, sessionID string, payload []byte) (wire.HookAnswer, error) {
	var ans wire.HookAnswer
	return ans, c.do(ctx, http.MethodPost, "/api/sessions/"+url.PathEscape(sessionID)+"/hooks", json.RawMessage(payload), &ans)
}

// Pending calls GET /api/permissions: the requests waiting for a human,
// of one session or ("") all.
func (c *Client) Pending(ctx context.Context, sessionID string) ([]wire.PermissionRequest, error) {
	var out wire.PermissionList
	path := "/api/permissions"
	if sessionID != "" {
		path += "?session=" + url.QueryEscape(sessionID)
	}
	return out.Pending, c.do(ctx, http.MethodGet, path, nil, &out)
}

// StreamEvents copies a session's log after afterSeq, up to untilSeq, to w
// as the daemon streams it (GET /api/sessions/{id}/events/stream): one
// session-update frame a line, passed through without being decoded. It
// fails when the stream ends before seq untilSeq, and returns how many
// events it copied. The request's time is bounded by ctx only: a long log
// takes as long as it takes.
func (c *Client) StreamEvents(ctx context.Context, id string, afterSeq, untilSeq int64, w io.Writer) (int64, error) {
	path := fmt.Sprintf("/api/sessions/%s/events/stream?after_seq=%d&until_seq=%d", url.PathEscape(id), afterSeq, untilSeq)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return 0, fmt.Errorf("build request: %w", err)
	}
	if c.opts.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.Token)
	}
	hc := *c.http
	hc.Timeout = 0
	resp, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%w at %s: %w", ErrUnreachable, c.where(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var eb wire.ErrorBody
		if json.Unmarshal(data, &eb) == nil && eb.Error.Message != "" {
			return 0, &APIError{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message}
		}
		return 0, &APIError{Status: resp.StatusCode, Code: "http_" + fmt.Sprint(resp.StatusCode), Message: strings.TrimSpace(string(data))}
	}
	lw := &lineCounter{w: w}
	_, err = io.CopyBuffer(lw, resp.Body, make([]byte, 256<<10))
	if err != nil {
		if ctx.Err() != nil {
			return lw.lines, ctx.Err()
		}
		return lw.lines, fmt.Errorf("read the log of session %s: %w", id, err)
	}
	if untilSeq > 0 && lw.lines < untilSeq-afterSeq {
		return lw.lines, fmt.Errorf("the log of session %s ended after %d of %d events", id, lw.lines, untilSeq-afterSeq)
	}
	return lw.lines, nil
}

// lineCounter counts the newlines that pass through it.
type lineCounter struct {
	w     io.Writer
	lines int64
}

func (l *lineCounter) Write(p []byte) (int, error) {
	n, err := l.w.Write(p)
	l.lines += int64(bytes.Count(p[:n], []byte{'\n'}))
	return n, err
}
