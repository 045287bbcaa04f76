package contextvault

import (
	"context"

	"reeve.dev/reeve/server/sdk"
)

// Status is the state of this device's vault.
type Status struct {
	DeviceID    string             `json:"device_id"`
	Device      *sdk.ContextDevice `json:"device,omitempty"`
	Fingerprint string             `json:"fingerprint,omitempty"`
	KeyStore    string             `json:"key_store"`
	KeyWhere    string             `json:"key_location"`
	HasKey      bool               `json:"has_key"`
	Sources     []SourceStatus     `json:"sources"`
	Offline     bool               `json:"offline"`
	Problem     string             `json:"problem,omitempty"`
}

// SourceStatus is one source on this device.
type SourceStatus struct {
	Source
	Entries    int        `json:"entries"`
	Conflicts  int        `json:"conflicts"`
	Unpushed   int        `json:"unpushed"`
	KeysHeld   int        `json:"keys_held"`
	Unreadable Unreadable `json:"unreadable"`
}

// Status reports the device and its sources; with a server it refreshes
// first (keys, rotations due, proposals waiting).
func (v *Vault) Status(ctx context.Context) (Status, error) {
	st := Status{DeviceID: v.DeviceID(), KeyStore: v.ks.Kind(), KeyWhere: v.ks.Where(), Sources: []SourceStatus{}, Offline: v.o.Server == nil}
	if pub, err := v.Public(); err == nil {
		st.HasKey, st.Fingerprint = true, pub.Fingerprint()
	}
	if v.o.Server != nil && st.DeviceID != "" {
		if d, err := v.o.Server.Device(ctx, st.DeviceID); err == nil {
			st.Device = &d
			if _, err := v.Refresh(ctx); err != nil {
				st.Problem = err.Error()
			}
		} else {
			st.Problem = apiErr("read this device", err).Error()
		}
	}
	srcs, err := v.l.sources()
	if err != nil {
		return st, err
	}
	for _, s := range srcs {
		ss := SourceStatus{Source: s}
		es, bad, err := v.Entries(s.ID)
		if err != nil {
			return st, err
		}
		ss.Unreadable = bad
		seen := map[string]bool{}
		for _, e := range es {
			if e.Conflict {
				ss.Conflicts++
			}
			if !seen[e.EntryID] {
				seen[e.EntryID] = true
				ss.Entries++
			}
		}
		out, err := v.l.outbox(s.ID)
		if err != nil {
			return st, err
		}
		ss.Unpushed = len(out)
		ks, err := v.l.keys(s.ID)
		if err != nil {
			return st, err
		}
		ss.KeysHeld = len(ks)
		st.Sources = append(st.Sources, ss)
	}
	return st, nil
}
