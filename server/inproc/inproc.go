// Package inproc calls an HTTP handler in the same process through an
// http.RoundTripper, so that parts of `reeve server` (the pages, the
// embedded relay) use the REST API through its real routes, authentication
// and throttles without a network hop.
package inproc

import (
	"bytes"
	"io"
	"net/http"
)

// Transport serves requests with h. remoteAddr is the address h sees as
// the caller: the throttles and logs of the API count it.
func Transport(h http.Handler, remoteAddr string) http.RoundTripper {
	return transport{h: h, remote: remoteAddr}
}

type transport struct {
	h      http.Handler
	remote string
}

func (t transport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	if r.Body == nil {
		r.Body = http.NoBody
	}
	r.RemoteAddr = t.remote
	r.RequestURI = r.URL.RequestURI()
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	t.h.ServeHTTP(rec, r)
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	return &http.Response{
		Status: http.StatusText(rec.status), StatusCode: rec.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: rec.header, Body: io.NopCloser(&rec.body), ContentLength: int64(rec.body.Len()),
		Request: req,
	}, nil
}

// recorder keeps a handler's answer.
type recorder struct {
	header http.Header
	body   bytes.Buffer
	status int
	wrote  bool
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if !r.wrote {
		r.status, r.wrote = status, true
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.body.Write(b)
}
