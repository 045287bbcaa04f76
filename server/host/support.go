package host

import (
	"context"
	"fmt"
	"time"

	"reeve.dev/reeve/server/store"
)

// SupportResult is what `reeve server support` did and the operators after.
type SupportResult struct {
	Changed   bool // the role was granted or revoked (false: already so)
	Operators []store.SupportOperator
}

// SupportOperators grants ("grant") or revokes ("revoke") the server-level
// support operator role of a user by email, or only lists ("list"), on the
// database directly. Granting to an email without a user creates the user
// (who then signs in with a login link). Revoking from a user without the
// role, or an unknown email, is store.ErrNotFound.
func SupportOperators(ctx context.Context, o Options, action, email string) (SupportResult, error) {
	db, err := openDB(ctx, o)
	if err != nil {
		return SupportResult{}, err
	}
	defer db.Close()
	var res SupportResult
	switch action {
	case "grant":
		u, _, err := db.EnsureUser(ctx, email)
		if err != nil {
			return res, err
		}
		if res.Changed, err = db.GrantSupportOperator(ctx, u.ID, "operator", time.Now()); err != nil {
			return res, err
		}
	case "revoke":
		u, err := db.UserByEmail(ctx, email)
		if err != nil {
			return res, fmt.Errorf("no user %q: %w", email, err)
		}
		if err := db.RevokeSupportOperator(ctx, u.ID); err != nil {
			return res, fmt.Errorf("%s is not a support operator: %w", email, err)
		}
		res.Changed = true
	case "list":
	default:
		return res, fmt.Errorf("unknown support action %q", action)
	}
	res.Operators, err = db.ListSupportOperators(ctx)
	return res, err
}
