package relay

import (
	"bytes"
	"io"
	"net/http"
)

// HandlerTransport serves HTTP requests with an in-process handler: the
// relay embedded in `reeve server` reaches its own control plane this way,
// through the same routes and authentication as a separate relay process,
// without a network hop.
func HandlerTransport(h http.Handler) http.RoundTripper { return handlerTransport{h} }

type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	r := req.Clone(req.Context())
	if r.Body == nil {
		r.Body = http.NoBody
	}
	r.RemoteAddr = "127.0.0.1:0"
	r.RequestURI = r.URL.RequestURI()
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
