// Package doctor holds codehub's preflight: checks an operator runs before
// the first start and whenever something looks wrong, each of which tries
// one dependency the way the server uses it, changes nothing that stays,
// and says what to change when it fails.
package doctor

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Status is a check's verdict.
type Status string

const (
	// OK: the dependency works as codehub needs it.
	OK Status = "ok"
	// Warn: codehub runs, but not as the docs recommend.
	Warn Status = "warn"
	// Fail: codehub, or part of it, will not work until this is fixed.
	Fail Status = "fail"
	// Skip: the check could not run (it does not apply, or something it
	// needs failed first).
	Skip Status = "skip"
)

// Finding is one check's result.
type Finding struct {
	// Check names what was tried, e.g. "nomad.capability.submit-job".
	Check  string `json:"check"`
	Status Status `json:"status"`
	// Detail says what was seen.
	Detail string `json:"detail"`
	// Fix says what to change; empty unless Status is Warn or Fail.
	Fix string `json:"fix,omitempty"`
	// Doc is the repository path and anchor of the section to read.
	Doc string `json:"doc,omitempty"`
}

// Failed reports whether any finding failed.
func Failed(fs []Finding) bool {
	for _, f := range fs {
		if f.Status == Fail {
			return true
		}
	}
	return false
}

// WriteJSON writes the findings as one JSON document for scripts.
func WriteJSON(w io.Writer, fs []Finding) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		OK       bool      `json:"ok"`
		Findings []Finding `json:"findings"`
	}{!Failed(fs), fs})
}

// WriteText writes one line per check, then what to change for each
// warning and failure.
func WriteText(w io.Writer, fs []Finding) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, f := range fs {
		// One line per check: Nomad's errors may span several.
		fmt.Fprintf(tw, "%s\t%s\t%s\n", strings.ToUpper(string(f.Status)), f.Check, strings.Join(strings.Fields(f.Detail), " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var fixes []Finding
	for _, f := range fs {
		if f.Fix != "" && (f.Status == Fail || f.Status == Warn) {
			fixes = append(fixes, f)
		}
	}
	if len(fixes) > 0 {
		fmt.Fprintln(w, "\nTo change:")
	}
	for _, f := range fixes {
		fmt.Fprintf(w, "- %s: %s", f.Check, f.Fix)
		if f.Doc != "" {
			fmt.Fprintf(w, " (%s)", f.Doc)
		}
		fmt.Fprintln(w)
	}
	failed, warned := 0, 0
	for _, f := range fs {
		switch f.Status {
		case Fail:
			failed++
		case Warn:
			warned++
		}
	}
	_, err := fmt.Fprintf(w, "\n%d checks: %d failed, %d warnings\n", len(fs), failed, warned)
	return err
}

// Sections of the docs findings point at.
const (
	DocACLs       = "docs/nomad.md#first-the-cluster-must-enforce-acls"
	DocPolicy     = "docs/nomad.md#least-privilege-acl-policy-for-codehubs-token"
	DocRequired   = "docs/nomad.md#required-nomad-version-and-settings"
	DocDeployment = "docs/nomad.md#deployment"
	DocTLS        = "docs/nomad.md#tls-in-front-nginx-recommended-or-traefik"
	DocDoctor     = "docs/nomad.md#preflight-codehub-doctor"
)
