package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// USD is an exact amount of US dollars in nano-dollars (1e-9 USD): ledger
// money is never a float. int64 holds up to about 9.2 billion dollars.
type USD int64

// USDScale is the number of decimal places a USD amount keeps.
const USDScale = 9

const nanosPerDollar = 1_000_000_000

// ErrBadAmount is returned by ParseUSD for text that is not a non-negative
// decimal amount with at most USDScale places.
var ErrBadAmount = errors.New("not a valid amount of US dollars")

// ParseUSD reads a decimal amount ("12", "0.000125", "1e-3" is refused):
// digits with an optional point and at most nine places, no sign, no
// exponent, so what is stored is exactly what was sent.
func ParseUSD(s string) (USD, error) {
	s = strings.TrimSpace(s)
	whole, frac, hasPoint := strings.Cut(s, ".")
	if whole == "" && (!hasPoint || frac == "") {
		return 0, fmt.Errorf("%w: %q", ErrBadAmount, s)
	}
	if hasPoint && frac == "" {
		return 0, fmt.Errorf("%w: %q has a point with no digits after it", ErrBadAmount, s)
	}
	for _, part := range []string{whole, frac} {
		for _, r := range part {
			if r < '0' || r > '9' {
				if r == '-' {
					return 0, fmt.Errorf("%w: %q is negative", ErrBadAmount, s)
				}
				return 0, fmt.Errorf("%w: %q is not a plain decimal number", ErrBadAmount, s)
			}
		}
	}
	frac = strings.TrimRight(frac, "0")
	if len(frac) > USDScale {
		return 0, fmt.Errorf("%w: %q has more than %d decimal places", ErrBadAmount, s, USDScale)
	}
	var w uint64
	if whole != "" {
		var err error
		if w, err = strconv.ParseUint(whole, 10, 64); err != nil || w > math.MaxInt64/nanosPerDollar-1 {
			return 0, fmt.Errorf("%w: %q is too large", ErrBadAmount, s)
		}
	}
	var f uint64
	if frac != "" {
		f, _ = strconv.ParseUint(frac+strings.Repeat("0", USDScale-len(frac)), 10, 64)
	}
	return USD(w*nanosPerDollar + f), nil
}

// USDFromJSON reads an amount given as a JSON string or a JSON number
// (json.Number from a decoder with UseNumber, or a float64 that is a
// whole number of cents or less precise: a float is formatted shortest
// first, so 0.1 reads as "0.1", never 0.1000000000000000055).
func USDFromJSON(v any) (USD, error) {
	switch x := v.(type) {
	case string:
		return ParseUSD(x)
	case json.Number:
		return ParseUSD(x.String())
	case float64:
		if x < 0 {
			return 0, fmt.Errorf("%w: %v is negative", ErrBadAmount, x)
		}
		return ParseUSD(strconv.FormatFloat(x, 'f', -1, 64))
	case int64:
		return ParseUSD(strconv.FormatInt(x, 10))
	case int:
		return ParseUSD(strconv.Itoa(x))
	}
	return 0, fmt.Errorf("%w: want a decimal string or a number", ErrBadAmount)
}

// String formats the amount with at least two decimal places ("12.50",
// "0.000125").
func (u USD) String() string {
	neg := u < 0
	n := uint64(u)
	if neg {
		n = uint64(-u)
	}
	whole, frac := n/nanosPerDollar, n%nanosPerDollar
	fs := strings.TrimRight(fmt.Sprintf("%09d", frac), "0")
	for len(fs) < 2 {
		fs += "0"
	}
	s := strconv.FormatUint(whole, 10) + "." + fs
	if neg {
		return "-" + s
	}
	return s
}

// Budget periods.
const (
	PeriodMonthly = "monthly"
	PeriodDaily   = "daily"
)

// PeriodKey names the period t falls in (UTC): "2026-11" for a month,
// "2026-11-23" for a day.
func PeriodKey(period string, t time.Time) string {
	if period == PeriodDaily {
		return t.UTC().Format("2006-01-02")
	}
	return t.UTC().Format("2006-01")
}

// PeriodBounds is the [start, end) of the period t falls in.
func PeriodBounds(period string, t time.Time) (time.Time, time.Time) {
	t = t.UTC()
	if period == PeriodDaily {
		s := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
		return s, s.AddDate(0, 0, 1)
	}
	s := time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	return s, s.AddDate(0, 1, 0)
}

// BudgetPolicy is a workspace's budget_policy: a hard cap on gateway
// spend per period, and an operator's switch that stops billable use.
type BudgetPolicy struct {
	// HardCap is nil when there is no cap.
	HardCap *USD
	// Period is PeriodMonthly (the default) or PeriodDaily.
	Period string
	// BillingActive false stops all billable use (402 billing_inactive).
	BillingActive *bool
	// WarnAt is the fraction of the cap (0..1) at which the workspace is
	// told it nears it; 0 when unset.
	WarnAt float64
}

// PolicyError names the field of a budget_policy that is wrong.
type PolicyError struct {
	Field   string // JSON pointer below budget_policy, e.g. "/hard_cap_usd"
	Message string
}

func (e *PolicyError) Error() string { return "budget_policy" + e.Field + ": " + e.Message }

// ParseBudgetPolicy validates a budget_policy document. null and absent
// mean no policy. Unknown members are refused, so a misspelt cap is an
// error, not silently no cap.
func ParseBudgetPolicy(raw json.RawMessage) (BudgetPolicy, error) {
	p := BudgetPolicy{Period: PeriodMonthly}
	if len(raw) == 0 || string(raw) == "null" {
		return p, nil
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return p, &PolicyError{Field: "", Message: "must be an object"}
	}
	for k, v := range m {
		switch k {
		case "hard_cap_usd":
			if v == nil {
				continue
			}
			c, err := USDFromJSON(v)
			if err != nil {
				return p, &PolicyError{Field: "/hard_cap_usd", Message: "want a non-negative decimal amount (a string such as \"25.00\" or a number) with at most 9 decimal places: " + err.Error()}
			}
			p.HardCap = &c
		case "period":
			s, _ := v.(string)
			if s != PeriodMonthly && s != PeriodDaily {
				return p, &PolicyError{Field: "/period", Message: `want "monthly" or "daily"`}
			}
			p.Period = s
		case "billing_active":
			if v == nil {
				continue
			}
			b, ok := v.(bool)
			if !ok {
				return p, &PolicyError{Field: "/billing_active", Message: "want true or false"}
			}
			p.BillingActive = &b
		case "warn_at_fraction":
			n, ok := v.(json.Number)
			f, err := n.Float64()
			if !ok || err != nil || f <= 0 || f > 1 {
				return p, &PolicyError{Field: "/warn_at_fraction", Message: "want a number above 0 and at most 1"}
			}
			p.WarnAt = f
		default:
			return p, &PolicyError{Field: "/" + k, Message: "unknown member; budget_policy has hard_cap_usd, period, billing_active and warn_at_fraction"}
		}
	}
	return p, nil
}
