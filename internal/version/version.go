// Package version holds the software version reported by the binary, the
// daemon's health route and the wire handshake.
package version

// Version is overridden at link time:
//
//	go build -ldflags "-X reeve.dev/reeve/internal/version.Version=1.2.3"
var Version = "0.1.0-dev"
