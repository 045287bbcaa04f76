package webhooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"reeve.dev/reeve/server/secrets"
	"reeve.dev/reeve/server/store"
	"reeve.dev/reeve/server/webhooksig"
)

// Store is what the dispatcher needs of the control plane's store.
type Store interface {
	Record(ctx context.Context, workspaceID, collection, id string) (store.Record, error)
	store.Integrations
}

// Options configure a Dispatcher; Store and Secrets are required.
type Options struct {
	Store   Store
	Secrets *secrets.Keyring
	Targets TargetPolicy
	// Schedule is the retry policy; zero fields take DefaultSchedule's.
	Schedule Schedule
	// Poll is how often the outbox is read when nothing woke the
	// dispatcher (another replica's messages, retries coming due);
	// default 250ms.
	Poll time.Duration
	// Timeout bounds one delivery; default 10s. A message's lease is
	// Timeout plus a margin, so a dispatcher killed mid-delivery leaves it
	// claimable again soon after.
	Timeout time.Duration
	// Concurrency is how many deliveries run at once; default 8.
	Concurrency int
	UserAgent   string
	Logger      *slog.Logger
	Now         func() time.Time
}

// Dispatcher delivers the outbox. Several (one per replica) may run on one
// database: claims are leases, and an attempt is recorded only under the
// lease that made it.
type Dispatcher struct {
	o      Options
	owner  string
	client *http.Client
	wake   chan struct{}
}

// New builds a dispatcher.
func New(o Options) *Dispatcher {
	o.Schedule = o.Schedule.withDefaults()
	if o.Poll <= 0 {
		o.Poll = 250 * time.Millisecond
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 8
	}
	if o.UserAgent == "" {
		o.UserAgent = "reeve-webhooks"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	dialer := &net.Dialer{Timeout: o.Timeout, Control: o.Targets.dialControl}
	tr := &http.Transport{
		DialContext:         dialer.DialContext,
		Proxy:               nil, // a proxy would hide the dialled address from the target check
		MaxIdleConnsPerHost: o.Concurrency,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: o.Timeout,
	}
	return &Dispatcher{
		o:     o,
		owner: "disp_" + ulid.Make().String(),
		client: &http.Client{Transport: tr, Timeout: o.Timeout,
			// A redirect is an answer, not a delivery: following it could
			// lead past the target check.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		wake: make(chan struct{}, 1),
	}
}

// Schedule is the effective retry policy.
func (d *Dispatcher) Schedule() Schedule { return d.o.Schedule }

// Targets is the policy endpoint URLs are checked against.
func (d *Dispatcher) Targets() TargetPolicy { return d.o.Targets }

// Notify wakes the dispatcher: something was just enqueued.
func (d *Dispatcher) Notify() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Run delivers until ctx ends. Deliveries in flight finish (each bounded
// by Timeout) before it returns.
func (d *Dispatcher) Run(ctx context.Context) error {
	sem := make(chan struct{}, d.o.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-d.wake:
		}
		for ctx.Err() == nil {
			free := d.o.Concurrency - len(sem)
			if free <= 0 {
				break
			}
			msgs, err := d.o.Store.ClaimWebhooks(ctx, d.owner, d.o.Now(), d.o.Timeout+30*time.Second, free)
			if err != nil {
				if ctx.Err() == nil {
					d.o.Logger.Warn("webhooks: claim", "err", err)
				}
				break
			}
			for _, m := range msgs {
				sem <- struct{}{}
				wg.Add(1)
				go func() {
					defer func() { <-sem; wg.Done(); d.Notify() }()
					d.deliver(context.WithoutCancel(ctx), m)
				}()
			}
			if len(msgs) < free {
				break
			}
		}
		t.Reset(d.o.Poll)
	}
}

// Result is what one attempt did, for callers that deliver directly.
type Result struct {
	StatusCode int
	Latency    time.Duration
	Err        error
}

func (d *Dispatcher) deliver(ctx context.Context, m store.WebhookMessage) {
	attempt := m.Attempts + 1
	res := d.attempt(ctx, m)
	now := d.o.Now()
	a := store.WebhookAttempt{MessageID: m.ID, WorkspaceID: m.WorkspaceID, EndpointID: m.EndpointID, Kind: m.Kind, Attempt: attempt,
		StatusCode: res.StatusCode, Latency: res.Latency, AttemptedAt: now}
	next := now
	switch {
	case res.Err == nil:
		a.Outcome = store.WebhookDelivered
	case errors.Is(res.Err, errGone) || attempt >= d.o.Schedule.MaxAttempts:
		a.Outcome, a.Error = store.WebhookDead, res.Err.Error()
	default:
		a.Outcome, a.Error = "retry", res.Err.Error()
		next = now.Add(d.o.Schedule.Delay(attempt))
	}
	if err := d.o.Store.FinishWebhookAttempt(ctx, d.owner, a, next); err != nil {
		// ErrConflict: our lease ran out and another dispatcher has the
		// message; its attempt is the one that counts.
		d.o.Logger.Warn("webhooks: record attempt", "message", m.ID, "err", err)
	}
}

// errGone ends a message at once: its endpoint no longer exists or is
// disabled.
var errGone = errors.New("the endpoint was deleted or disabled")

func (d *Dispatcher) attempt(ctx context.Context, m store.WebhookMessage) Result {
	rec, err := d.o.Store.Record(ctx, m.WorkspaceID, store.WebhookEndpointCollection, m.EndpointID)
	if errors.Is(err, store.ErrNotFound) {
		return Result{Err: errGone}
	}
	if err != nil {
		return Result{Err: err}
	}
	ep, err := Decode(rec)
	if err != nil {
		return Result{Err: err}
	}
	if ep.Disabled || ep.Direction != Outbound {
		return Result{Err: errGone}
	}
	return d.Send(ctx, m.EndpointID, ep, m.ID, m.Payload)
}

// Send makes one signed POST of payload to the endpoint.
func (d *Dispatcher) Send(ctx context.Context, endpointID string, ep Endpoint, msgID string, payload []byte) Result {
	now := d.o.Now()
	keys, err := ep.LiveSecrets(d.o.Secrets, endpointID, now)
	if err != nil {
		return Result{Err: err}
	}
	if len(keys) == 0 {
		return Result{Err: errors.New("the endpoint has no live secret")}
	}
	// The target is checked again at send time: the policy may have
	// changed since the endpoint was saved.
	u, err := d.o.Targets.CheckURL(ctx, ep.URL)
	if err != nil {
		return Result{Err: err}
	}
	ts, sig := webhooksig.SignStandard(msgID, now, payload, keys...)
	ctx, cancel := context.WithTimeout(ctx, d.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(payload))
	if err != nil {
		return Result{Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", d.o.UserAgent)
	req.Header.Set(webhooksig.HeaderID, msgID)
	req.Header.Set(webhooksig.HeaderTimestamp, ts)
	req.Header.Set(webhooksig.HeaderSignature, sig)
	start := time.Now()
	resp, err := d.client.Do(req)
	lat := time.Since(start)
	if err != nil {
		return Result{Latency: lat, Err: fmt.Errorf("post: %w", err)}
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return Result{StatusCode: resp.StatusCode, Latency: lat, Err: fmt.Errorf("the receiver answered HTTP %d", resp.StatusCode)}
	}
	return Result{StatusCode: resp.StatusCode, Latency: lat}
}
