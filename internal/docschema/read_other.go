//go:build !unix

package docschema

const nonblock = 0
