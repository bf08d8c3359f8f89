package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// blockingWriter records a response, holding its first write until let
// is closed and saying when that write began.
type blockingWriter struct {
	*httptest.ResponseRecorder
	writing chan struct{}
	let     chan struct{}
}

func (w *blockingWriter) Write(b []byte) (int, error) {
	select {
	case <-w.writing:
	default:
		close(w.writing)
		<-w.let
	}
	return w.ResponseRecorder.Write(b)
}

// The page telling the browser how the login ended is written before the
// result goes to the command, which then ends and takes the loopback
// server down: the other way round, the browser met a closed connection
// instead of "Login approved".
func TestCallbackAnswersBeforeTheResult(t *testing.T) {
	results := make(chan loginResult) // unbuffered: the handler waits here
	h := callbackHandler("s1", func(code string) (string, error) { return "codehub_secret", nil }, results)
	w := &blockingWriter{ResponseRecorder: httptest.NewRecorder(), writing: make(chan struct{}), let: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/callback?state=s1&code=c1", nil))
	}()
	select {
	case <-w.writing:
	case res := <-results:
		t.Fatalf("the result (%+v) went to the command before the page was written", res)
	}
	close(w.let)
	if res := <-results; res.err != nil || res.token != "codehub_secret" {
		t.Fatalf("result %+v", res)
	}
	<-done
	if !strings.Contains(w.Body.String(), "Login approved") {
		t.Errorf("the page: %q", w.Body.String())
	}
}
