//go:build !linux

package store

import "os"

// syncData makes what was written to f durable; see syncdata_linux.go.
// Elsewhere it is File.Sync (on macOS a full fsync, F_FULLFSYNC).
func syncData(f *os.File) error { return f.Sync() }
