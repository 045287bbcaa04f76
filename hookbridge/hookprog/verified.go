package hookprog

import (
	"os"
	"sync"
	"time"
)

// Verify hashes the whole program, the size of the reeve executable (tens
// of MB), and the daemon verifies before every governed launch: with many
// sessions starting that was several percent of the worker's CPU and tens
// of milliseconds of each launch. A program whose file is provably the
// one already hashed is not hashed again.
//
// "Provably" is the file's identity as the kernel keeps it: device, inode,
// size, and the modification and change times. Rewriting the file updates
// its change time (ctime), which, unlike the modification time, no
// unprivileged process can set back; replacing it gives a new inode. File
// times have a coarse granularity, though (a clock tick), so a write in
// the same tick as a check could leave every field as it was: a file is
// only remembered when its ctime is older than settle at the time it is
// hashed, as version control systems treat "racily clean" files.
type fileIdentity struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64 // nanoseconds
}

// settle is how old a file's last change must be for its hash to be
// remembered; a variable so that tests need not wait.
var settle = 2 * time.Second

var verified struct {
	sync.Mutex
	m map[string]verifiedFile // by path
}

type verifiedFile struct {
	id     fileIdentity
	digest string
}

// alreadyVerified reports whether the file at path, as st describes it,
// is the one last hashed there with the digest.
func alreadyVerified(path, digest string, st os.FileInfo) bool {
	id, ok := identityOf(st)
	if !ok {
		return false
	}
	verified.Lock()
	defer verified.Unlock()
	v, ok := verified.m[path]
	return ok && v.id == id && v.digest == digest
}

// rememberVerified records that the file at path, as st describes it,
// hashed to digest, unless it changed too recently to be told apart from
// a later write (see settle).
func rememberVerified(path, digest string, st os.FileInfo, now time.Time) {
	id, ok := identityOf(st)
	if !ok || now.UnixNano()-id.ctime < settle.Nanoseconds() {
		return
	}
	verified.Lock()
	defer verified.Unlock()
	if verified.m == nil {
		verified.m = map[string]verifiedFile{}
	}
	// A home has one program per reeve version, so the map stays small;
	// bound it anyway against a caller verifying arbitrary paths.
	if len(verified.m) >= 64 {
		clear(verified.m)
	}
	verified.m[path] = verifiedFile{id: id, digest: digest}
}
