package webhooks

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The documented policy: ten attempts over about a day, growing delays.
func TestDefaultSchedule(t *testing.T) {
	s := DefaultSchedule.withDefaults()
	if total := s.Total(); total < 22*time.Hour || total > 26*time.Hour {
		t.Fatalf("default schedule spans %s, documented as about a day", total)
	}
	want := []time.Duration{5 * time.Second, 20 * time.Second, 80 * time.Second, 320 * time.Second, 1280 * time.Second, 5120 * time.Second, 20480 * time.Second, 8 * time.Hour, 8 * time.Hour}
	for i, w := range want {
		if got := s.Nominal(i + 1); got != w {
			t.Fatalf("delay after attempt %d = %s, want %s", i+1, got, w)
		}
	}
	for n := 1; n < 10; n++ {
		for range 100 {
			d, nom := s.Delay(n), s.Nominal(n)
			if d < nom*8/10 || d > nom*12/10 {
				t.Fatalf("jittered delay %s outside ±20%% of %s", d, nom)
			}
		}
	}
}

func TestTargetPolicy(t *testing.T) {
	ctx := context.Background()
	strict := TargetPolicy{Self: []string{"cp.example.com:443", "127.0.0.1:8080"}}
	open := TargetPolicy{AllowPrivate: true, Self: strict.Self}
	cases := []struct {
		url          string
		strict, open bool
	}{
		{"https://93.184.215.14/hook", true, true},
		{"http://93.184.215.14:8080/hook", true, true},
		{"ftp://93.184.215.14/", false, false},
		{"javascript:alert(1)", false, false},
		{"http://127.0.0.1:9000/", false, true},
		{"http://127.0.0.1:8080/", false, false},  // the server's listen address
		{"http://localhost:8080/x", false, false}, // the same, by name
		{"https://cp.example.com/api", false, false},
		{"http://10.0.0.5/", false, true},
		{"http://192.168.1.1/", false, true},
		{"http://[fd00::1]/", false, true},
		{"http://169.254.169.254/", false, true},
		{"http://100.64.1.1/", false, true},
		{"http://0.0.0.0:9000/", false, false},
		{"http://[::ffff:127.0.0.1]:9000/", false, true},
		{"http://u:p@93.184.215.14/", false, false},
		{"http:///nohost", false, false},
	}
	for _, c := range cases {
		_, err := strict.CheckURL(ctx, c.url)
		if (err == nil) != c.strict {
			t.Errorf("strict %s: %v", c.url, err)
		}
		if err != nil && !errors.Is(err, ErrTarget) {
			t.Errorf("%s: error does not wrap ErrTarget: %v", c.url, err)
		}
		if _, err := open.CheckURL(ctx, c.url); (err == nil) != c.open {
			t.Errorf("allow-private %s: %v", c.url, err)
		}
	}
	// The dialer refuses a private address even when the name looked public.
	if err := strict.dialControl("tcp", "10.0.0.1:443", nil); !errors.Is(err, ErrTarget) {
		t.Fatalf("dial control: %v", err)
	}
}
