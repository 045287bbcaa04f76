package api

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"reeve.dev/reeve/server/sdk"
	"reeve.dev/reeve/server/store"
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
// The failure budgets are shared by every replica through the database
// (store.TakeBucket), so N replicas do not allow N times the guesses; the
// request and mint rates live in each server's memory (they bound load,
// not guessing, which the failure budgets bound).
const (
	pairingIPRate        = 5.0
	pairingIPBurst       = 30.0
	pairingMintBurst     = 10.0
	pairingFailBurst     = 10.0
	pairingCodeFailBurst = 5.0
	perMinute            = 1.0 / 60
)

type pairGuard struct {
	requests *throttle       // per address
	mints    *throttle       // per address
	ipFails  *sharedFailures // per address
	code     *sharedFailures // per code (wrong status tokens)
}

func newPairGuard(st store.Store) *pairGuard {
	return &pairGuard{
		requests: newThrottle(pairingIPRate, pairingIPBurst),
		mints:    newThrottle(perMinute, pairingMintBurst),
		ipFails:  &sharedFailures{st: st, name: "pairing-address-failures", rate: perMinute, burst: pairingFailBurst},
		code:     &sharedFailures{st: st, name: "pairing-code-failures", rate: perMinute, burst: pairingCodeFailBurst},
	}
}

// sharedFailures is a failure budget (a token bucket only failures drain)
// kept in the database, shared by every replica.
type sharedFailures struct {
	st          store.Store
	name        string
	rate, burst float64
	n           atomic.Uint32 // reservations made here, to prune now and then
}

// reserve takes one failure from key's budget before the attempt, so
// that concurrent attempts (on any replica) cannot all pass one check: it
// reports how long to wait when none was left. An attempt that does not
// fail gives its token back (refund).
func (f *sharedFailures) reserve(ctx context.Context, key string, now time.Time) (time.Duration, bool, error) {
	held, err := f.st.TakeBucket(ctx, f.name, key, f.rate, f.burst, 1, now)
	if err != nil {
		return 0, false, err
	}
	if held < 1 {
		return time.Duration((1 - held) / f.rate * float64(time.Second)), false, nil
	}
	// A bucket untouched for as long as a full refill takes is the same
	// as none: drop such rows now and then.
	if f.n.Add(1)%256 == 0 {
		if _, err := f.st.PruneBuckets(ctx, now.Add(-time.Duration(f.burst/f.rate*float64(time.Second))-time.Minute)); err != nil {
			return 0, false, err
		}
	}
	return 0, true, nil
}

// check reports how long key must wait before its next attempt counts,
// taking nothing.
func (f *sharedFailures) check(ctx context.Context, key string, now time.Time) (time.Duration, bool, error) {
	held, err := f.st.TakeBucket(ctx, f.name, key, f.rate, f.burst, 0, now)
	if err != nil || held >= 1 {
		return 0, err == nil, err
	}
	return time.Duration((1 - held) / f.rate * float64(time.Second)), false, nil
}

// fail takes one failure from key's budget.
func (f *sharedFailures) fail(ctx context.Context, key string, now time.Time) error {
	_, err := f.st.TakeBucket(ctx, f.name, key, f.rate, f.burst, 1, now)
	return err
}

func (f *sharedFailures) refund(ctx context.Context, key string, now time.Time) error {
	_, err := f.st.TakeBucket(ctx, f.name, key, f.rate, f.burst, -1, now)
	return err
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
		if wait, ok, err := g.ipFails.reserve(c.ctx(), ip, now); err != nil {
			return 0, nil, err
		} else if !ok {
			return 0, nil, rateLimited(wait, "too many failed pairing attempts from this address; retry later")
		}
		// The code's budget is checked, not reserved: a daemon may poll
		// its own code several times at once. Its failures still count on
		// every replica; the address budget above is the strict one.
		if c.route.Method == http.MethodGet && c.route.Auth == AuthPublic {
			wait, ok, err := g.code.check(c.ctx(), code, now)
			if err == nil && !ok {
				err = rateLimited(wait, "too many wrong status tokens for this code; retry later")
			}
			if err != nil {
				return 0, nil, errors.Join(err, g.ipFails.refund(c.ctx(), ip, now))
			}
		}
		status, body, err := h(c)
		var ae *apiError
		addrFailed, codeFailed := false, false
		if errors.As(err, &ae) {
			switch {
			case ae.Status == http.StatusNotFound && ae.Code == sdk.CodeNotFound:
				addrFailed = true
			case ae == errBadStatusToken:
				addrFailed, codeFailed = true, true
			}
		}
		// What did not fail gives its reserved token back.
		var rerr error
		if !addrFailed {
			rerr = g.ipFails.refund(c.ctx(), ip, now)
		}
		if codeFailed {
			rerr = errors.Join(rerr, g.code.fail(c.ctx(), code, now))
		}
		if rerr != nil && err == nil {
			return 0, nil, rerr
		}
		return status, body, err
	}
}
