package httpresult

import (
	"context"
	"errors"
	"net/http"
	"syscall"
	"testing"
)

func TestOf(t *testing.T) {
	live := &http.Request{}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	gone := (&http.Request{}).WithContext(cancelled)
	for _, c := range []struct {
		name string
		req  *http.Request
		code int
		err  error
		want string
	}{
		{"ok", live, http.StatusOK, nil, OK},
		{"not found", live, http.StatusNotFound, nil, ClientError},
		{"forbidden", live, http.StatusForbidden, nil, ClientError},
		{"server error", live, http.StatusServiceUnavailable, nil, ServerError},
		{"refused", live, 0, syscall.ECONNREFUSED, Unreachable},
		{"cancelled by its caller", gone, 0, context.Canceled, ""},
		{"cancelled, wrapped", live, 0, errors.Join(errors.New("read"), context.Canceled), ""},
	} {
		var resp *http.Response
		if c.err == nil {
			resp = &http.Response{StatusCode: c.code}
		}
		if got := Of(c.req, resp, c.err); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
