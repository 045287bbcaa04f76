package relay

import (
	"net/http"

	"reeve.dev/reeve/server/inproc"
)

// HandlerTransport serves HTTP requests with an in-process handler: the
// relay embedded in `reeve server` reaches its own control plane this way,
// through the same routes and authentication as a separate relay process,
// without a network hop.
func HandlerTransport(h http.Handler) http.RoundTripper {
	return inproc.Transport(h, "127.0.0.1:0")
}
