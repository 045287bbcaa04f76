package api

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"reeve.dev/reeve/server/sdk"
)

// A pairing code carries about 40 bits and the pairing routes are public,
// so guessing is throttled in three ways, each answering 429 with
// Retry-After:
//
//   - every client address may make pairingIPRate requests per second on
//     the pairing routes (burst pairingIPBurst) and mint pairingMintBurst
//     codes, one more each minute;
//   - an address that names unknown codes or presents wrong status tokens
//     has pairingFailBurst failures, one more each minute, after which
//     every pairing lookup from it is refused until one is back;
//   - a code whose status token is guessed wrong pairingCodeFailBurst times
//     refuses status polls the same way, whoever asks.
//
// The limits live in each server's memory: replicas each apply their own.
const (
	pairingIPRate        = 5.0
	pairingIPBurst       = 30.0
	pairingMintBurst     = 10.0
	pairingFailBurst     = 10.0
	pairingCodeFailBurst = 5.0
	perMinute            = 1.0 / 60
)

type pairGuard struct {
	requests *throttle // per address
	mints    *throttle // per address
	ipFails  *failures // per address
	code     *failures // per code (wrong status tokens)
}

func newPairGuard() *pairGuard {
	return &pairGuard{
		requests: newThrottle(pairingIPRate, pairingIPBurst),
		mints:    newThrottle(perMinute, pairingMintBurst),
		ipFails:  newFailures(perMinute, pairingFailBurst),
		code:     newFailures(perMinute, pairingCodeFailBurst),
	}
}

// failures is a token bucket that only failures drain: a check does not
// consume, a failure does.
type failures struct {
	rate, burst float64
	mu          sync.Mutex
	m           map[string]*bucket
}

func newFailures(rate, burst float64) *failures {
	return &failures{rate: rate, burst: burst, m: map[string]*bucket{}}
}

func (f *failures) refill(key string, now time.Time) *bucket {
	b, ok := f.m[key]
	if !ok {
		if len(f.m) > 100000 {
			clear(f.m)
		}
		b = &bucket{tokens: f.burst, last: now}
		f.m[key] = b
	}
	b.tokens = min(f.burst, b.tokens+now.Sub(b.last).Seconds()*f.rate)
	b.last = now
	return b
}

// check reports how long key must wait before its next attempt counts.
func (f *failures) check(key string, now time.Time) (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.refill(key, now)
	if b.tokens < 1 {
		return time.Duration((1 - b.tokens) / f.rate * float64(time.Second)), false
	}
	return 0, true
}

func (f *failures) fail(key string, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.refill(key, now)
	b.tokens = max(0, b.tokens-1)
}

func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func rateLimited(wait time.Duration, format string, args ...any) error {
	e := errorf(http.StatusTooManyRequests, sdk.CodeRateLimited, format, args...)
	e.Header = http.Header{"Retry-After": {fmt.Sprint(int(wait.Seconds()) + 1)}}
	return e
}

// guarded wraps a pairing handler with the throttles above. mint says the
// route creates codes; lookups name a code in the path.
func (s *Server) guarded(mint bool, h handlerFunc) handlerFunc {
	return func(c *call) (int, any, error) {
		g, now, ip := s.pairs, s.opts.Now(), clientAddr(c.r)
		if wait, ok := g.requests.allow(ip, now); !ok {
			return 0, nil, rateLimited(wait, "too many pairing requests from this address; retry later")
		}
		if mint {
			if wait, ok := g.mints.allow(ip, now); !ok {
				return 0, nil, rateLimited(wait, "too many pairing codes minted from this address; retry later")
			}
			return h(c)
		}
		code := normCode(c.r.PathValue("code"))
		if wait, ok := g.ipFails.check(ip, now); !ok {
			return 0, nil, rateLimited(wait, "too many failed pairing attempts from this address; retry later")
		}
		if c.route.Method == http.MethodGet && c.route.Auth == AuthPublic {
			if wait, ok := g.code.check(code, now); !ok {
				return 0, nil, rateLimited(wait, "too many wrong status tokens for this code; retry later")
			}
		}
		status, body, err := h(c)
		var ae *apiError
		if errors.As(err, &ae) {
			switch {
			case ae.Status == http.StatusNotFound && ae.Code == sdk.CodeNotFound:
				g.ipFails.fail(ip, now)
			case ae == errBadStatusToken:
				g.ipFails.fail(ip, now)
				g.code.fail(code, now)
			}
		}
		return status, body, err
	}
}
