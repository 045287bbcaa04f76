package worker

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// Where a runner credential came from, as `worker doctor` reports it (the
// value itself is never printed).
const (
	CredentialFile    = "file"    // --credential-file, or the profile's credential_file
	CredentialProfile = "profile" // kept in the profile (pair --worker)
	CredentialInline  = "inline"  // $REEVE_RUNNER_CREDENTIAL
	CredentialNone    = "none"
)

// CredentialEnv passes a runner credential inline. It is an environment
// variable rather than a flag so that the value never shows in a process
// listing.
const CredentialEnv = "REEVE_RUNNER_CREDENTIAL"

// ErrNoCredential means no source held a runner credential.
var ErrNoCredential = errors.New("no runner credential: pass --credential-file FILE, set " + CredentialEnv + ", or pair with `reeve pair --worker`")

// Credential is a resolved runner credential.
type Credential struct {
	Source string // file, profile, inline or none
	Path   string // the file, for Source file
	value  string
}

// Value is the secret; callers put it in an Authorization header only.
func (c Credential) Value() string { return c.value }

// String never shows the value.
func (c Credential) String() string {
	if c.Path != "" {
		return c.Source + " " + c.Path
	}
	return c.Source
}

// ResolveCredential picks the credential: an explicit file first, then
// the inline environment value, then the profile (its credential, else
// its credential file). A named source that is empty or unreadable is an
// error, not a fall-through, so a typo never runs with another identity.
func ResolveCredential(file, inline string, p Profile) (Credential, error) {
	if file != "" {
		return readCredentialFile(file)
	}
	if inline != "" {
		v := strings.TrimSpace(inline)
		if v == "" {
			return Credential{Source: CredentialInline}, fmt.Errorf("%s is blank", CredentialEnv)
		}
		return Credential{Source: CredentialInline, value: v}, nil
	}
	if p.Credential != "" {
		return Credential{Source: CredentialProfile, value: strings.TrimSpace(p.Credential)}, nil
	}
	if p.CredentialFile != "" {
		return readCredentialFile(p.CredentialFile)
	}
	return Credential{Source: CredentialNone}, ErrNoCredential
}

func readCredentialFile(path string) (Credential, error) {
	c := Credential{Source: CredentialFile, Path: path}
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("runner credential file: %w", err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return c, fmt.Errorf("runner credential file %s is empty", path)
	}
	if strings.ContainsAny(v, "\n\r\t ") {
		return c, fmt.Errorf("runner credential file %s holds more than one token", path)
	}
	c.value = v
	return c, nil
}
