// Package layering holds no code; its test enforces the rules of direction
// between the module's packages (design section 1) by reading `go list
// -deps`, so a forbidden import fails the suite rather than a review.
package layering
