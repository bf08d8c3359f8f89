package api

import (
	_ "embed"
	"net/http"
)

// OpenAPI is the OpenAPI 3 document of the REST API, served at
// /api/v1/openapi.json and checked against real responses by the tests.
//
//go:embed openapi.json
var OpenAPI []byte

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(OpenAPI)
}
