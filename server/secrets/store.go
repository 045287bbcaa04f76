package secrets

import (
	"context"
	"errors"
	"fmt"
)

// Store is where sealed records live (the control plane's store). It only
// ever sees sealed bytes.
type Store interface {
	// Secret returns the named record, creating it with gen on first use;
	// when two writers race, both get the record that was stored.
	Secret(ctx context.Context, name string, gen func() ([]byte, error)) ([]byte, error)
	// ReplaceSecret swaps the record's value from old to new; it reports
	// false, without error, when the value is no longer old.
	ReplaceSecret(ctx context.Context, name string, old, new []byte) (bool, error)
	// SecretNames lists the records.
	SecretNames(ctx context.Context) ([]string, error)
}

// Get returns the plaintext of the named secret, creating it with gen, and
// storing it sealed, on first use. A record found in the clear (stored before
// encryption at rest) or under an older master key is sealed under the
// current key in place.
func (k *Keyring) Get(ctx context.Context, st Store, name string, gen func() ([]byte, error)) ([]byte, error) {
	rec, err := st.Secret(ctx, name, func() ([]byte, error) {
		if gen == nil {
			return nil, fmt.Errorf("no secret %s", name)
		}
		v, err := gen()
		if err != nil {
			return nil, err
		}
		return k.Seal(name, v)
	})
	if err != nil {
		return nil, err
	}
	for range 3 {
		var v, next []byte
		switch {
		case k.Current(rec):
			return k.Open(name, rec)
		case Sealed(rec):
			if v, err = k.Open(name, rec); err != nil {
				return nil, err
			}
			if next, err = k.Rewrap(name, rec); err != nil {
				return nil, err
			}
		default:
			// Stored in the clear by an older version: seal it now.
			v = rec
			if next, err = k.Seal(name, v); err != nil {
				return nil, err
			}
		}
		ok, err := st.ReplaceSecret(ctx, name, rec, next)
		if err != nil {
			return nil, fmt.Errorf("seal secret %s in place: %w", name, err)
		}
		if ok {
			return v, nil
		}
		// Another process sealed it first: read what it stored.
		if rec, err = st.Secret(ctx, name, func() ([]byte, error) {
			return nil, errors.New("secret vanished while being sealed")
		}); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("seal secret %s in place: the record keeps changing", name)
}

// RewrapAll seals every record under the current master key: records in the
// clear are sealed, records under an older key re-wrapped. It returns how
// many records it changed. After it succeeds, older keys can be dropped.
func (k *Keyring) RewrapAll(ctx context.Context, st Store) (int, error) {
	names, err := st.SecretNames(ctx)
	if err != nil {
		return 0, fmt.Errorf("list secrets: %w", err)
	}
	n := 0
	for _, name := range names {
		rec, err := st.Secret(ctx, name, func() ([]byte, error) {
			return nil, errors.New("secret vanished while being re-wrapped")
		})
		if err != nil {
			return n, err
		}
		if k.Current(rec) {
			if _, err := k.Open(name, rec); err != nil {
				return n, err
			}
			continue
		}
		if _, err := k.Get(ctx, st, name, nil); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
