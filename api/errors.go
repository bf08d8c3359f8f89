package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/codehub-io/codehub/workspace"
)

// Error codes of the envelope {"error":{"code","message"}} (docs/api.md).
const (
	CodeInvalidJSON      = "INVALID_JSON"
	CodeInvalidInput     = "INVALID_INPUT"
	CodeUnauthenticated  = "UNAUTHENTICATED"
	CodeForbidden        = "FORBIDDEN"
	CodeCrossOrigin      = "CROSS_ORIGIN"
	CodeNotFound         = "NOT_FOUND"
	CodeMethodNotAllowed = "METHOD_NOT_ALLOWED"
	CodeNameTaken        = "NAME_TAKEN"
	CodeInvalidState     = "INVALID_STATE"
	CodeBodyTooLarge     = "BODY_TOO_LARGE"
	CodeBodyTimeout      = "BODY_TIMEOUT"
	CodeUnsupportedMedia = "UNSUPPORTED_MEDIA_TYPE"
	CodeLimitExceeded    = "LIMIT_EXCEEDED"
	CodeTooManyAttempts  = "TOO_MANY_ATTEMPTS"
	CodeInternal         = "INTERNAL"
	// CodeShareAboveCap: a port share level wider than the server allows.
	CodeShareAboveCap = "SHARE_ABOVE_CAP"
	// CodeReadOnlyToken refuses a change sent with a read token.
	CodeReadOnlyToken = "READ_ONLY_TOKEN"
	// CodeSessionRequired refuses to a token what needs a dashboard login.
	CodeSessionRequired = "SESSION_REQUIRED"
	// CodeBackendUnavailable: Nomad (or another backend) did not answer.
	CodeBackendUnavailable = "BACKEND_UNAVAILABLE"
	// CodeConfirmationRequired: the request would lose data and did not
	// confirm it; the message says what.
	CodeConfirmationRequired = "CONFIRMATION_REQUIRED"
)

// maxBodyBytes bounds every JSON request body.
const maxBodyBytes = 64 << 10

// Error is an API error as the client sees it.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

func newError(status int, code, message string) *Error {
	return &Error{Status: status, Code: code, Message: message}
}

// WriteError writes the error envelope.
func WriteError(w http.ResponseWriter, e *Error) {
	writeJSON(w, e.Status, struct {
		Error *Error `json:"error"`
	}{e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// decodeJSON reads exactly one JSON object with only known fields from a
// body of at most maxBodyBytes.
func decodeJSON(w http.ResponseWriter, r *http.Request, dst any, timeout time.Duration) *Error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(strings.ToLower(ct), "application/json") {
		return newError(http.StatusUnsupportedMediaType, CodeUnsupportedMedia, "request body must be application/json")
	}
	body, err := readBody(w, r, timeout)
	if err != nil {
		return jsonError(err)
	}
	// A literal null decodes into a struct without error and would pass as
	// an empty object.
	if v := bytes.TrimLeft(body, " \t\r\n"); len(v) > 0 && v[0] != '{' {
		return newError(http.StatusBadRequest, CodeInvalidJSON, "request body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return jsonError(err)
	}
	if err := dec.Decode(&struct{}{}); !errors.Is(err, io.EOF) {
		return newError(http.StatusBadRequest, CodeInvalidJSON, "request body must hold a single JSON object")
	}
	return nil
}

// readBody reads a request body of at most maxBodyBytes within timeout.
// The server has no ReadTimeout (it would cut WebSockets and event
// streams), so without this a client trickling its body would hold the
// handler as long as it liked.
func readBody(w http.ResponseWriter, r *http.Request, timeout time.Duration) ([]byte, error) {
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return nil, err
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err == nil {
		// The connection may serve further requests.
		_ = rc.SetReadDeadline(time.Time{})
	}
	return body, err
}

func jsonError(err error) *Error {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return newError(http.StatusBadRequest, CodeBodyTooLarge, fmt.Sprintf("request body exceeds %d bytes", maxBodyBytes))
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return newError(http.StatusRequestTimeout, CodeBodyTimeout, "request body did not arrive in time")
	}
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalidInput, Field: typeErr.Field,
			Message: fmt.Sprintf("%s: must be a %s", typeErr.Field, typeErr.Type.Kind())}
	}
	if errors.Is(err, io.EOF) {
		return newError(http.StatusBadRequest, CodeInvalidJSON, "request body is empty")
	}
	return newError(http.StatusBadRequest, CodeInvalidJSON, "malformed JSON: "+err.Error())
}

// serviceError maps an error of the workspace service layer to the client's
// answer; anything unexpected is logged and becomes 500 without detail.
func serviceError(logger hclog.Logger, err error) *Error {
	var input *workspace.InputError
	switch {
	case errors.As(err, &input):
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalidInput, Field: input.Field, Message: input.Error()}
	case errors.Is(err, workspace.ErrNotFound):
		return newError(http.StatusNotFound, CodeNotFound, "workspace not found")
	case errors.Is(err, workspace.ErrNameTaken):
		return newError(http.StatusConflict, CodeNameTaken, "you already have a workspace with that name")
	case errors.Is(err, workspace.ErrInvalidState):
		return newError(http.StatusConflict, CodeInvalidState, err.Error())
	case errors.Is(err, workspace.ErrLimitExceeded):
		return newError(http.StatusTooManyRequests, CodeLimitExceeded, err.Error())
	}
	logFailure(logger, "request failed", err)
	return internalError()
}

// logFailure logs a failed request at ERROR, where an operator must act,
// unless it failed because its context ended: the browser went away (a
// closed tab, a navigation) or the server is stopping, which is no fault.
func logFailure(logger hclog.Logger, msg string, err error, args ...any) {
	level := hclog.Error
	if errors.Is(err, context.Canceled) {
		level = hclog.Debug
	}
	logger.Log(level, msg, append(args, "error", err)...)
}

func internalError() *Error {
	return newError(http.StatusInternalServerError, CodeInternal, "internal error")
}
