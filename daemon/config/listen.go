package config

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Listen is a parsed listen address, ready for net.Listen(l.Network, l.Address).
type Listen struct {
	Network string `json:"network"` // "tcp" or "unix"
	Address string `json:"address"` // host:port for tcp, the socket path for unix
}

// ParseListen reads the listen setting: host:port (IPv6 in brackets), a bare
// port, or a unix socket path. Anything containing a slash is a socket path,
// since neither a host nor a port can contain one. A bare port binds
// 127.0.0.1: a user who gives only a port has not asked to be reachable from
// the network.
func ParseListen(s string) (Listen, error) {
	if strings.TrimSpace(s) == "" {
		return Listen{}, errors.New("listen address is empty: want host:port, a port, or a unix socket path")
	}
	if strings.Contains(s, "/") {
		return Listen{Network: "unix", Address: s}, nil
	}
	if isDigits(s) {
		if _, err := parsePort(s); err != nil {
			return Listen{}, fmt.Errorf("listen address %q: %w", s, err)
		}
		return Listen{Network: "tcp", Address: net.JoinHostPort("127.0.0.1", s)}, nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		reason := err.Error()
		var ae *net.AddrError
		if errors.As(err, &ae) {
			reason = ae.Err
		}
		return Listen{}, fmt.Errorf("listen address %q: want host:port, a port, or a unix socket path (%s)", s, reason)
	}
	if port == "" {
		return Listen{}, fmt.Errorf("listen address %q: the port is missing", s)
	}
	if _, err := parsePort(port); err != nil {
		return Listen{}, fmt.Errorf("listen address %q: %w", s, err)
	}
	if strings.ContainsAny(host, " \t\r\n[]") {
		return Listen{}, fmt.Errorf("listen address %q: invalid host %q", s, host)
	}
	if strings.Contains(host, ":") && net.ParseIP(host) == nil {
		return Listen{}, fmt.Errorf("listen address %q: invalid IPv6 address %q", s, host)
	}
	return Listen{Network: "tcp", Address: net.JoinHostPort(host, port)}, nil
}

// IsLoopback reports whether only this machine can reach the address: a unix
// socket, localhost, 127.0.0.0/8 or ::1. An empty host or an unspecified
// address (0.0.0.0, ::) binds every interface, and any other name may resolve
// anywhere, so they are not loopback.
func (l Listen) IsLoopback() bool {
	if l.Network == "unix" {
		return true
	}
	host, _, err := net.SplitHostPort(l.Address)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// String is the address as a user would write it back.
func (l Listen) String() string { return l.Address }

func parsePort(s string) (int, error) {
	if !isDigits(s) {
		return 0, fmt.Errorf("port %q is not a number", s)
	}
	n, err := strconv.Atoi(s)
	// Port 0 asks the kernel for a free port; the daemon records the port it
	// got in its endpoint file, where clients look it up.
	if err != nil || n < 0 || n > 65535 {
		return 0, fmt.Errorf("port %s is out of range 0-65535", s)
	}
	return n, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
