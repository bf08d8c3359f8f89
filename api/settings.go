package api

import (
	"errors"
	"net/http"
	"regexp"
	"strings"

	"github.com/codehub-io/codehub/store"
)

// settingsView is a user's first-start settings as the API shows them:
// the git credential only as set or not, never its value.
type settingsView struct {
	DotfilesRepository string `json:"dotfiles_repository"`
	GitCredentialSet   bool   `json:"git_credential_set"`
}

type settingsPatch struct {
	DotfilesRepository *string `json:"dotfiles_repository"`
	GitCredential      *string `json:"git_credential"`
}

func viewSettings(s store.FirstStartSettings) settingsView {
	return settingsView{DotfilesRepository: s.DotfilesRepository, GitCredentialSet: s.GitCredential != ""}
}

// viewStored is the view of settings as read, err the read's error: a
// stored credential that does not open (sealed for another user or with
// another deployment's key) is still shown as set, so its owner can
// replace or clear it.
func viewStored(s store.FirstStartSettings, err error) (settingsView, error) {
	if errors.Is(err, store.ErrCredentialUnreadable) {
		v := viewSettings(s)
		v.GitCredentialSet = true
		return v, nil
	}
	return viewSettings(s), err
}

func (s *Server) getSettings(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.requireUser(w, r)
	if !ok {
		return
	}
	view, err := viewStored(store.GetFirstStartSettings(r.Context(), s.pool, sess.UserID))
	if err != nil {
		s.fail(w, "read settings", err)
		return
	}
	writeJSON(w, http.StatusOK, view)
}

func (s *Server) patchSettings(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.requireUser(w, r)
	if !ok {
		return
	}
	var req settingsPatch
	if e := decodeJSON(w, r, &req, s.opts.BodyReadTimeout); e != nil {
		WriteError(w, e)
		return
	}
	if e := checkSettings(req); e != nil {
		WriteError(w, e)
		return
	}
	view, err := viewStored(store.SetFirstStartSettings(r.Context(), s.pool, sess.UserID, req.DotfilesRepository, req.GitCredential))
	if err != nil {
		s.fail(w, "write settings", err)
		return
	}
	writeJSON(w, http.StatusOK, view)
}

// gitURL is what git clones from: a URL of a scheme it speaks.
var gitURL = regexp.MustCompile(`^(https|http|ssh|git|file)://[^\s]+$`)

// Bounds of the settings, in bytes.
const (
	maxRepositoryURL = 2048
	maxGitCredential = 4096
)

// checkSettings refuses a dotfiles URL git could not clone and a
// credential that would break the line it is written on.
func checkSettings(req settingsPatch) *Error {
	if d := req.DotfilesRepository; d != nil && *d != "" && (len(*d) > maxRepositoryURL || !gitURL.MatchString(*d)) {
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalidInput, Field: "dotfiles_repository",
			Message: "dotfiles_repository: must be empty or an https://, http://, ssh://, git:// or file:// URL of at most 2048 bytes"}
	}
	if c := req.GitCredential; c != nil && (len(*c) > maxGitCredential || strings.ContainsFunc(*c, isControl)) {
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalidInput, Field: "git_credential",
			Message: "git_credential: must be at most 4096 bytes without control characters"}
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }
