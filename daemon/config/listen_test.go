package config

import (
	"strings"
	"testing"
)

func TestParseListen(t *testing.T) {
	tests := []struct {
		in       string
		network  string
		address  string
		loopback bool
	}{
		{"127.0.0.1:7070", "tcp", "127.0.0.1:7070", true},
		{"127.8.9.10:80", "tcp", "127.8.9.10:80", true},
		{"localhost:7070", "tcp", "localhost:7070", true},
		{"LocalHost:7070", "tcp", "LocalHost:7070", true},
		{"7070", "tcp", "127.0.0.1:7070", true},
		{"[::1]:7070", "tcp", "[::1]:7070", true},
		{"0.0.0.0:7070", "tcp", "0.0.0.0:7070", false},
		{"[::]:7070", "tcp", "[::]:7070", false},
		{":7070", "tcp", ":7070", false},
		{"192.168.1.5:65535", "tcp", "192.168.1.5:65535", false},
		{"example.com:1", "tcp", "example.com:1", false},
		{"/run/reeve.sock", "unix", "/run/reeve.sock", true},
		{"./reeve.sock", "unix", "./reeve.sock", true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			l, err := ParseListen(tt.in)
			if err != nil {
				t.Fatalf("ParseListen(%q): %v", tt.in, err)
			}
			if l.Network != tt.network || l.Address != tt.address {
				t.Errorf("ParseListen(%q) = %+v, want {%s %s}", tt.in, l, tt.network, tt.address)
			}
			if got := l.IsLoopback(); got != tt.loopback {
				t.Errorf("ParseListen(%q).IsLoopback() = %v, want %v", tt.in, got, tt.loopback)
			}
		})
	}
}

func TestParseListenInvalid(t *testing.T) {
	tests := []struct {
		in   string
		want string // part of the error message
	}{
		{"", "empty"},
		{"   ", "empty"},
		{"abc", "missing port"},
		{":99999", "out of range 0-65535"},
		{"70700", "out of range 0-65535"},
		{"host:", "port is missing"},
		{"host:http", `port "http" is not a number`},
		{"host:-1", `not a number`},
		{"::1:7070", "too many colons"},
		{"[fe80::zz]:7070", "invalid IPv6"},
		{"my host:7070", "invalid host"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			l, err := ParseListen(tt.in)
			if err == nil {
				t.Fatalf("ParseListen(%q) = %+v, want an error", tt.in, l)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseListen(%q) error %q, want it to mention %q", tt.in, err, tt.want)
			}
		})
	}
}
