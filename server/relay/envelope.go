// Package relay routes end-to-end encrypted envelopes between paired
// daemons and remote clients. It reads only the envelope, never the payload
// inside it, which the two ends seal for each other.
package relay

import "reeve.dev/reeve/server/relay/relaywire"

// The envelope is defined once, in the leaf package relaywire, which the
// daemon and remote clients import without linking the relay server; these
// names let the relay's own code keep reading as it did.

// Envelope is one WebSocket text message on the relay (relaywire.Envelope).
type Envelope = relaywire.Envelope

// Envelope types.
const (
	TypeOpen  = relaywire.TypeOpen
	TypeData  = relaywire.TypeData
	TypeClose = relaywire.TypeClose
	TypeError = relaywire.TypeError
)

// Roles of relay connections.
const (
	RoleDaemon = relaywire.RoleDaemon
	RoleClient = relaywire.RoleClient
)
