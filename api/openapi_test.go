package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/codehub-io/codehub/api"
)

var openAPIRouter = sync.OnceValues(func() (routers.Router, error) {
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, err
	}
	// The document's server is the relative path /api/v1, which the router
	// does not match; requests are matched with that prefix removed.
	doc.Servers = nil
	return legacy.NewRouter(doc)
})

// validating is a RoundTripper that checks every /api/v1 response (event
// streams aside) against the served OpenAPI document.
type validating struct {
	t    testing.TB
	next http.RoundTripper
	// seen counts validated responses by status, so the test can tell the
	// validator actually ran.
	mu   sync.Mutex
	seen map[int]int
}

func (v *validating) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := v.next.RoundTrip(req)
	if err != nil || !strings.HasPrefix(req.URL.Path, "/api/v1/") || req.URL.Path == "/api/v1/events" {
		return res, err
	}
	body, rerr := io.ReadAll(res.Body)
	res.Body.Close()
	if rerr != nil {
		return nil, rerr
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	router, err := openAPIRouter()
	if err != nil {
		v.t.Errorf("load openapi document: %v", err)
		return res, nil
	}
	relative := req.Clone(req.Context())
	relative.URL.Path = strings.TrimPrefix(req.URL.Path, "/api/v1")
	route, params, err := router.FindRoute(relative)
	if err != nil && (res.StatusCode == http.StatusNotFound || res.StatusCode == http.StatusMethodNotAllowed) {
		// Paths and methods the API does not have still answer with the
		// documented error envelope.
		v.checkError(body)
		return res, nil
	}
	if err != nil {
		v.t.Errorf("%s %s: not in the OpenAPI document: %v", req.Method, req.URL.Path, err)
		return res, nil
	}
	in := &openapi3filter.RequestValidationInput{Request: relative, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: res.StatusCode, Header: res.Header,
		Body: io.NopCloser(bytes.NewReader(body)), Options: &openapi3filter.Options{IncludeResponseStatus: true},
	}
	if err := openapi3filter.ValidateResponse(req.Context(), out); err != nil {
		v.t.Errorf("%s %s -> %d does not match the OpenAPI document: %v\n%s", req.Method, req.URL.Path, res.StatusCode, err, body)
	}
	v.mu.Lock()
	v.seen[res.StatusCode]++
	v.mu.Unlock()
	return res, nil
}

func (v *validating) checkError(body []byte) {
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		v.t.Errorf("load openapi document: %v", err)
		return
	}
	var value any
	if err := json.Unmarshal(body, &value); err != nil {
		v.t.Errorf("error body %s: %v", body, err)
		return
	}
	if err := doc.Components.Schemas["Error"].Value.VisitJSON(value); err != nil {
		v.t.Errorf("error body %s does not match the Error schema: %v", body, err)
	}
}

// validate makes every response c receives checked against the document.
func validate(t testing.TB, c *http.Client) *validating {
	v := &validating{t: t, next: http.DefaultTransport, seen: map[int]int{}}
	c.Transport = v
	return v
}
