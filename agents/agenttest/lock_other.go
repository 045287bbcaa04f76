//go:build !unix

package agenttest

import (
	"context"
	"errors"
)

// lockFile is unsupported off unix; the agents are only exercised on
// unix hosts, so callers see an install error and the tests skip.
func lockFile(context.Context, string) (func(), error) {
	return nil, errors.New("file locking not supported on this platform")
}
