package webhooks

import (
	"math/rand/v2"
	"time"
)

// Schedule is the retry policy of the dispatcher: after failed attempt n
// (1-based) the next comes Base*Factor^(n-1) later, capped at Max, with
// ±Jitter of it at random, until MaxAttempts have failed; then the message
// is dead-lettered.
//
// The default (5s, ×4, capped at 8h, 10 attempts) waits 5s, 20s, 80s,
// 5m20s, 21m20s, 1h25m, 5h41m, 8h and 8h between the ten attempts: about
// 23.6 hours from the first attempt to the dead letter.
type Schedule struct {
	Base        time.Duration
	Factor      float64
	Max         time.Duration
	MaxAttempts int
	Jitter      float64 // fraction, 0.2 = ±20%
}

// DefaultSchedule is the documented retry policy (docs/integrations.md).
var DefaultSchedule = Schedule{Base: 5 * time.Second, Factor: 4, Max: 8 * time.Hour, MaxAttempts: 10, Jitter: 0.2}

func (s Schedule) withDefaults() Schedule {
	d := DefaultSchedule
	if s.Base > 0 {
		d.Base = s.Base
	}
	if s.Factor >= 1 {
		d.Factor = s.Factor
	}
	if s.Max > 0 {
		d.Max = s.Max
	}
	if s.MaxAttempts > 0 {
		d.MaxAttempts = s.MaxAttempts
	}
	if s.Jitter > 0 {
		d.Jitter = s.Jitter
	} else if s.Jitter < 0 {
		d.Jitter = 0
	}
	return d
}

// Nominal is the delay after failed attempt n, before jitter.
func (s Schedule) Nominal(n int) time.Duration {
	d := float64(s.Base)
	for i := 1; i < n; i++ {
		d *= s.Factor
		if d >= float64(s.Max) {
			return s.Max
		}
	}
	return min(time.Duration(d), s.Max)
}

// Delay is Nominal(n) with jitter: spreading retries keeps a receiver that
// came back from being hit by every message at once.
func (s Schedule) Delay(n int) time.Duration {
	d := s.Nominal(n)
	if s.Jitter <= 0 {
		return d
	}
	f := 1 + s.Jitter*(2*rand.Float64()-1)
	return time.Duration(float64(d) * f)
}

// Total is the nominal time from the first attempt to the last.
func (s Schedule) Total() time.Duration {
	var t time.Duration
	for n := 1; n < s.MaxAttempts; n++ {
		t += s.Nominal(n)
	}
	return t
}
