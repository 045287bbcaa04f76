// Package openapi holds the committed OpenAPI 3.1 document of the control
// plane. It is generated from the route table in server/api (go generate
// ./server/api); a test there fails when this copy lags the table, and a
// test here runs an independent linter over it.
package openapi

import _ "embed"

// Document is the committed openapi.json.
//
//go:embed openapi.json
var Document []byte
