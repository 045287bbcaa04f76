package relaylink

import (
	"sync"
	"time"

	"reeve.dev/reeve/daemon/wire"
)

// Lock decides whether a remote client may drive the daemon, and for how
// long. Remote control is locked by default. It opens in two ways:
//
//   - on the machine: `reeve pair unlock [--ttl S]` unlocks until now+S;
//     every channel admitted meanwhile is closed when that ends, unless the
//     machine unlocks again first (which extends them);
//   - auto-unlock (pair --auto-unlock): each new channel is unlocked for
//     the auto-unlock TTL from the moment it opens, then closed, so no
//     remote control session outlives the TTL without someone reconnecting
//     through the relay with a valid workspace token.
//
// TTLs are clamped to 300..3600 seconds (default 1800).
type Lock struct {
	now     func() time.Time
	auto    bool
	autoTTL time.Duration

	mu    sync.Mutex
	until time.Time // end of the unlock given on the machine
}

// NewLock builds a lock; autoTTLSeconds is clamped. now defaults to
// time.Now.
func NewLock(autoUnlock bool, autoTTLSeconds int, now func() time.Time) *Lock {
	if now == nil {
		now = time.Now
	}
	return &Lock{now: now, auto: autoUnlock, autoTTL: time.Duration(wire.ClampUnlockTTL(autoTTLSeconds)) * time.Second}
}

// Unlock opens remote control for ttlSeconds (clamped) from now and
// returns the end. A shorter unlock never cuts a longer one short.
func (l *Lock) Unlock(ttlSeconds int) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	end := l.now().Add(time.Duration(wire.ClampUnlockTTL(ttlSeconds)) * time.Second)
	if end.After(l.until) {
		l.until = end
	}
	return l.until
}

// Grant is one admitted channel's claim on the lock.
type Grant struct {
	// autoUntil is the end of the channel's own auto-unlock; zero when it
	// was admitted by the machine's unlock.
	autoUntil time.Time
}

// refusal is what a locked daemon tells a remote client.
const refusal = "remote control of this machine is locked: run `reeve pair unlock` on the machine, or pair it with --auto-unlock"

// Admit decides a new channel.
func (l *Lock) Admit() (Grant, string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if now.Before(l.until) {
		return Grant{}, "", true
	}
	if l.auto {
		return Grant{autoUntil: now.Add(l.autoTTL)}, "", true
	}
	return Grant{}, refusal, false
}

// Until is when the channel holding g must close: the later of its own
// auto-unlock and the machine's unlock.
func (l *Lock) Until(g Grant) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if g.autoUntil.After(l.until) {
		return g.autoUntil
	}
	return l.until
}

// Expired reports whether the channel holding g must close now.
func (l *Lock) Expired(g Grant) bool { return !l.now().Before(l.Until(g)) }

// state fills the lock's part of a status.
func (l *Lock) state(s *wire.RemoteStatus) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	s.AutoUnlock = l.auto
	s.AutoUnlockTTLSeconds = int(l.autoTTL / time.Second)
	s.Locked = !l.auto && !now.Before(l.until)
	if now.Before(l.until) {
		s.UnlockedUntil = l.until.UTC()
	}
}
