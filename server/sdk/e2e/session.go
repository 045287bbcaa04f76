package e2e

import (
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
)

// A transport frame is
//
//	kind (1 byte, KindData) | flags (1 byte) | counter (8 bytes, big-endian) | AES-256-GCM(chunk)
//
// sealed with the sender's direction key, the 96-bit nonce 0x00000000 ||
// counter, and the 10-byte header as associated data. Each direction counts
// from 0 and the receiver accepts only the exact next counter, so a frame
// that is altered, dropped, reordered or replayed fails, and the session is
// then dead: it never resynchronises, the channel is closed and the client
// starts a new one (new keys) and resumes from what it last saw.
//
// A message longer than MaxChunk is sent as several frames; flags bit 0
// marks the last one. The flag is authenticated, so frames cannot be cut or
// spliced across messages. Fragmenting keeps every relay envelope small
// whatever the control protocol sends.

const (
	headerLen = 1 + 1 + 8
	flagFinal = 1
	// MaxChunk is the largest plaintext in one frame.
	MaxChunk = 32 << 10
	// MaxFrame is the largest transport frame.
	MaxFrame = headerLen + MaxChunk + tagLen
	// DefaultMaxMessage bounds a reassembled message unless
	// Session.SetMaxMessage says otherwise.
	DefaultMaxMessage = 16 << 20
)

// Errors of the transport. Every failure of Open wraps ErrFrame and one of
// the more precise ones.
var (
	ErrFrame     = errors.New("e2e frame refused")
	ErrTampered  = errors.New("frame failed authentication (altered, or sealed with another key)")
	ErrReplay    = errors.New("frame counter is not the next one (replayed, reordered or dropped)")
	ErrTooLarge  = errors.New("frame or message is over the size bound")
	ErrMalformed = errors.New("frame is malformed")
	// ErrExhausted is a direction that has sent 2^64-1 frames.
	ErrExhausted = errors.New("e2e counter exhausted")
)

// Session is an established end-to-end channel: one key and counter per
// direction. Sending and receiving may run concurrently with each other;
// concurrent senders are serialised by Seal so that frames go out in
// counter order.
type Session struct {
	binding [keyLen]byte

	sendMu sync.Mutex
	send   direction

	recvMu     sync.Mutex
	recv       direction
	partial    []byte
	maxMessage int
	failed     error
}

type direction struct {
	aead cipher.AEAD
	n    uint64
}

func newSession(sendKey, recvKey, binding [keyLen]byte) (*Session, error) {
	sa, err := newAEAD(sendKey[:])
	if err != nil {
		return nil, err
	}
	ra, err := newAEAD(recvKey[:])
	if err != nil {
		return nil, err
	}
	return &Session{binding: binding, send: direction{aead: sa}, recv: direction{aead: ra}, maxMessage: DefaultMaxMessage}, nil
}

// Binding is the final handshake hash: equal on both ends of one channel
// and unique to it.
func (s *Session) Binding() []byte { return append([]byte(nil), s.binding[:]...) }

// SetMaxMessage bounds the messages Open reassembles (at least MaxChunk).
func (s *Session) SetMaxMessage(n int) {
	s.recvMu.Lock()
	defer s.recvMu.Unlock()
	s.maxMessage = max(n, MaxChunk)
}

// Seal encrypts msg into one or more frames and hands each to write, in
// order, holding the send side for the whole message so that concurrent
// callers cannot interleave their frames or their counters. An error from
// write is returned as is; the session must then be abandoned, since the
// peer expects the frames that were not delivered.
func (s *Session) Seal(msg []byte, write func(frame []byte) error) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	for {
		chunk := msg
		var flags byte = flagFinal
		if len(chunk) > MaxChunk {
			chunk, flags = chunk[:MaxChunk], 0
		}
		msg = msg[len(chunk):]
		frame, err := s.sealFrame(flags, chunk)
		if err != nil {
			return err
		}
		if err := write(frame); err != nil {
			return err
		}
		if flags&flagFinal != 0 {
			return nil
		}
	}
}

func (s *Session) sealFrame(flags byte, chunk []byte) ([]byte, error) {
	if s.send.n == math.MaxUint64 {
		return nil, ErrExhausted
	}
	frame := make([]byte, headerLen, headerLen+len(chunk)+tagLen)
	frame[0], frame[1] = KindData, flags
	binary.BigEndian.PutUint64(frame[2:headerLen], s.send.n)
	frame = s.send.aead.Seal(frame, nonce(s.send.n), chunk, frame[:headerLen])
	s.send.n++
	return frame, nil
}

func nonce(n uint64) []byte {
	var b [12]byte
	binary.BigEndian.PutUint64(b[4:], n)
	return b[:]
}

// Open authenticates one frame. It returns the whole message once its last
// frame has arrived (done true), or done false while a long message is
// still arriving. Any failure is final: this and every later call return
// the error, and the channel must be closed.
func (s *Session) Open(frame []byte) (msg []byte, done bool, err error) {
	s.recvMu.Lock()
	defer s.recvMu.Unlock()
	if s.failed != nil {
		return nil, false, s.failed
	}
	msg, done, err = s.open(frame)
	if err != nil {
		s.failed = err
		s.partial = nil
	}
	return msg, done, err
}

func (s *Session) open(frame []byte) ([]byte, bool, error) {
	h, err := ParseFrame(frame)
	if err != nil {
		return nil, false, err
	}
	if h.Counter != s.recv.n {
		return nil, false, fmt.Errorf("%w: %w: got %d, want %d", ErrFrame, ErrReplay, h.Counter, s.recv.n)
	}
	if len(s.partial)+len(frame)-headerLen-tagLen > s.maxMessage {
		return nil, false, fmt.Errorf("%w: %w: message over %d bytes", ErrFrame, ErrTooLarge, s.maxMessage)
	}
	out, err := s.recv.aead.Open(s.partial, nonce(s.recv.n), frame[headerLen:], frame[:headerLen])
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w: frame %d", ErrFrame, ErrTampered, h.Counter)
	}
	s.recv.n++
	if h.Final {
		s.partial = nil
		return out, true, nil
	}
	s.partial = out
	return nil, false, nil
}

// FrameHeader is the clear part of a transport frame.
type FrameHeader struct {
	Counter uint64
	Final   bool
}

// ParseFrame checks a transport frame's shape and reads its header without
// decrypting it.
func ParseFrame(frame []byte) (FrameHeader, error) {
	if len(frame) > MaxFrame {
		return FrameHeader{}, fmt.Errorf("%w: %w: %d bytes", ErrFrame, ErrTooLarge, len(frame))
	}
	if len(frame) < headerLen+tagLen {
		return FrameHeader{}, fmt.Errorf("%w: %w: %d bytes is too short", ErrFrame, ErrMalformed, len(frame))
	}
	if frame[0] != KindData {
		return FrameHeader{}, fmt.Errorf("%w: %w: kind %d is not a data frame", ErrFrame, ErrMalformed, frame[0])
	}
	if frame[1]&^flagFinal != 0 {
		return FrameHeader{}, fmt.Errorf("%w: %w: unknown flags %#x", ErrFrame, ErrMalformed, frame[1])
	}
	return FrameHeader{Counter: binary.BigEndian.Uint64(frame[2:headerLen]), Final: frame[1]&flagFinal != 0}, nil
}
