// Package ulid makes the IDs of sessions, records and messages: ULIDs
// (github.com/ulid/spec), 26 characters of Crockford's base32 holding a
// 48-bit Unix time in milliseconds and 80 random bits, so that they sort by
// the time they were made. Within one millisecond a process's IDs still
// sort in the order they were made: the random part of the last one grows
// by a random step instead of being drawn again.
//
// It replaces github.com/oklog/ulid/v2, of which reeve used only Make: that
// package seeds a math/rand source in its init, which every command of the
// binary paid for (about 50k instructions, a sixth of a hello-world's
// whole run) before reading a flag. This one does nothing until called.
package ulid

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"time"
)

// Len is the length of an ID.
const Len = 26

const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

var (
	mu       sync.Mutex
	lastMS   uint64
	lastRand [10]byte
)

// Make returns a new ID for the current time.
func Make() string { return makeAt(time.Now()) }

func makeAt(t time.Time) string {
	ms := uint64(t.UnixMilli()) & (1<<48 - 1)
	mu.Lock()
	if ms != lastMS || !increment(&lastRand) {
		rand.Read(lastRand[:])
		lastMS = ms
	}
	var id [16]byte
	binary.BigEndian.PutUint16(id[0:], uint16(ms>>32))
	binary.BigEndian.PutUint32(id[2:], uint32(ms))
	copy(id[6:], lastRand[:])
	mu.Unlock()
	return encode(id)
}

// increment adds a random step in [1, 2^32] to the 80-bit number r and
// reports false, leaving r as it was, when the sum would not fit.
func increment(r *[10]byte) bool {
	var step [4]byte
	rand.Read(step[:])
	hi := binary.BigEndian.Uint16(r[0:])
	lo := binary.BigEndian.Uint64(r[2:])
	sum := lo + uint64(binary.BigEndian.Uint32(step[:])) + 1
	if sum < lo { // carry into the top 16 bits
		if hi == 0xFFFF {
			return false
		}
		hi++
	}
	binary.BigEndian.PutUint16(r[0:], hi)
	binary.BigEndian.PutUint64(r[2:], sum)
	return true
}

// encode writes the 128 bits of id as 26 base32 digits, most significant
// first (the first digit holds only the top 3 bits).
func encode(id [16]byte) string {
	hi := binary.BigEndian.Uint64(id[0:])
	lo := binary.BigEndian.Uint64(id[8:])
	var out [Len]byte
	for i := Len - 1; i >= 0; i-- {
		out[i] = alphabet[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}
