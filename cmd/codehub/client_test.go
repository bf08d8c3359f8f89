package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"
)

func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, exitOK},
		{&apiError{Status: http.StatusNotFound}, exitNotFound},
		{fmt.Errorf("resolve: %w", errNotFound), exitNotFound},
		{&apiError{Status: http.StatusUnauthorized}, exitRefused},
		{&apiError{Status: http.StatusForbidden}, exitRefused},
		{&apiError{Status: http.StatusConflict}, exitRefused},
		{&apiError{Status: http.StatusTooManyRequests}, exitRefused},
		{errNotLoggedIn, exitRefused},
		{&usageError{"not confirmed"}, exitUsage},
		{&apiError{Status: http.StatusInternalServerError}, exitFailed},
		{&apiError{Status: http.StatusBadGateway}, exitFailed},
		{errors.New("connection refused"), exitFailed},
	} {
		if got := exitStatus(tc.err); got != tc.want {
			t.Errorf("exitStatus(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		positional []string
		image      string
		help, bad  bool
	}{
		{[]string{"backend"}, []string{"backend"}, "", false, false},
		{[]string{"backend", "-image", "i:1"}, []string{"backend"}, "i:1", false, false},
		{[]string{"-image=i:1", "backend", "-json"}, []string{"backend"}, "i:1", false, false},
		{[]string{"--", "-odd"}, []string{"-odd"}, "", false, false},
		{[]string{"backend", "-h"}, nil, "", true, false},
		{[]string{"backend", "-nope"}, nil, "", false, true},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		image := fs.String("image", "", "")
		fs.Bool("json", false, "")
		pos, help, err := parseArgs(fs, tc.args)
		if !slices.Equal(pos, tc.positional) || help != tc.help || (err != nil) != tc.bad || *image != tc.image {
			t.Errorf("%q: %q help=%v err=%v image=%q", tc.args, pos, help, err, *image)
		}
	}
}
