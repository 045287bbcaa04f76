package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
)

// TargetPolicy decides which URLs an outbound endpoint may point at. Only
// http and https are allowed; the control plane itself never is (a
// webhook must not be a way to call the API from inside); private,
// loopback and link-local addresses only when AllowPrivate is set (a
// deployment delivering inside its own network, and tests).
type TargetPolicy struct {
	AllowPrivate bool
	// Self lists the host:port pairs this server answers on (its public
	// origin and its listen address).
	Self []string
}

// ErrTarget wraps every refusal of a target.
var ErrTarget = errors.New("webhook target refused")

// CheckURL validates u as an endpoint URL without connecting; names are
// resolved, so a name pointing at a private address is refused too. The
// dialer checks again at connect time (DNS can change in between).
func (p TargetPolicy) CheckURL(ctx context.Context, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTarget, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%w: the scheme must be http or https, not %q", ErrTarget, u.Scheme)
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, fmt.Errorf("%w: the URL has no host", ErrTarget)
	}
	if u.User != nil {
		return nil, fmt.Errorf("%w: credentials in the URL are not allowed; the signature authenticates deliveries", ErrTarget)
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if p.isSelf(u.Hostname(), port) {
		return nil, fmt.Errorf("%w: the URL points at this server", ErrTarget)
	}
	addrs, err := resolve(ctx, u.Hostname())
	if err != nil {
		return nil, fmt.Errorf("%w: resolve %s: %v", ErrTarget, u.Hostname(), err)
	}
	for _, a := range addrs {
		if err := p.checkAddr(a, port); err != nil {
			return nil, err
		}
	}
	return u, nil
}

func resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return []netip.Addr{a.Unmap()}, nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	for i := range ips {
		ips[i] = ips[i].Unmap()
	}
	return ips, nil
}

func (p TargetPolicy) isSelf(host, port string) bool {
	for _, s := range p.Self {
		h, pt, err := net.SplitHostPort(s)
		if err != nil {
			continue
		}
		if pt != port {
			continue
		}
		if strings.EqualFold(h, host) {
			return true
		}
		// The listen address may be a wildcard or a loopback spelling.
		ha, err1 := netip.ParseAddr(strings.Trim(host, "[]"))
		sa, err2 := netip.ParseAddr(h)
		if err1 == nil && err2 == nil && (ha == sa || sa.IsUnspecified() || (ha.IsLoopback() && sa.IsLoopback())) {
			return true
		}
		if err2 == nil && (sa.IsUnspecified() || sa.IsLoopback()) && strings.EqualFold(host, "localhost") {
			return true
		}
	}
	return false
}

func (p TargetPolicy) checkAddr(a netip.Addr, port string) error {
	if p.isSelf(a.String(), port) {
		return fmt.Errorf("%w: the URL points at this server", ErrTarget)
	}
	if a.IsUnspecified() || a.IsMulticast() {
		return fmt.Errorf("%w: %s is not a unicast address", ErrTarget, a)
	}
	if p.AllowPrivate {
		return nil
	}
	if a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || isShared(a) {
		return fmt.Errorf("%w: %s is a private or loopback address (allowed only with the server's allow-private-webhook-targets setting)", ErrTarget, a)
	}
	return nil
}

// isShared is the carrier-grade NAT range 100.64.0.0/10, private in
// practice but not in netip's IsPrivate.
func isShared(a netip.Addr) bool {
	return netip.MustParsePrefix("100.64.0.0/10").Contains(a)
}

// dialControl re-checks the address actually dialled, so a name that
// resolved to a public address when the endpoint was saved cannot be
// re-pointed at a private one.
func (p TargetPolicy) dialControl(network, address string, _ syscall.RawConn) error {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("%w: dial %s", ErrTarget, address)
	}
	return p.checkAddr(a.Unmap(), port)
}
