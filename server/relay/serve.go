package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"reeve.dev/reeve/server/sdk"
)

// ServeOptions configure a stand-alone relay process (`reeve relay`).
type ServeOptions struct {
	// Listen is host:port.
	Listen string
	// ServerURL is the control plane the relay admits through and shares
	// presence and the bus with.
	ServerURL string
	// Credential is the relay service credential (rvr_).
	Credential string
	// Relay tunes the relay (Control and Logger are set here).
	Relay  Options
	Logger *slog.Logger
	// Ready receives the bound address once listening.
	Ready func(addr string)
}

// Serve runs a relay on its own listener until ctx ends: /ws is the relay,
// /healthz answers when it is up, /metrics shows its counters. It checks
// the credential against the server first, so a wrong one fails at start.
func Serve(ctx context.Context, o ServeOptions) error {
	if o.ServerURL == "" {
		return errors.New("relay: the control plane URL is required")
	}
	if o.Credential == "" {
		return errors.New("relay: the relay service credential is required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	ctl := &HTTPControl{ServerURL: o.ServerURL, Credential: o.Credential}
	ro := o.Relay
	ro.Control, ro.Logger = ctl, o.Logger
	r, err := New(ro)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	_, err = ctl.Pull(cctx, sdk.RelayBusPullRequest{InstanceID: r.InstanceID()})
	cancel()
	if err != nil {
		var ae *sdk.APIError
		if errors.As(err, &ae) && ae.Status == http.StatusUnauthorized {
			return fmt.Errorf("relay: the control plane at %s refused the relay credential", o.ServerURL)
		}
		return fmt.Errorf("relay: reach the control plane at %s: %w", o.ServerURL, err)
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.Listen, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ws", r)
	mux.Handle("GET /metrics", r.MetricsHandler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, "{\"status\":\"ok\",\"instance_id\":%q}\n", r.InstanceID())
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn)}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	runDone := make(chan struct{})
	go func() { r.Run(ctx); close(runDone) }()
	if o.Ready != nil {
		o.Ready(ln.Addr().String())
	}
	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	r.Close()
	<-runDone
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	srv.Shutdown(sctx)
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}
