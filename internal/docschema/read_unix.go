//go:build unix

package docschema

import "syscall"

const nonblock = syscall.O_NONBLOCK
