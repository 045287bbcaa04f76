//go:build !linux

package memtrim

func dropExecutablePages() {}
