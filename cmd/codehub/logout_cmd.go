package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func runLogout(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	u, stop := newUserCLI(stdin, stdout, stderr)
	defer stop()
	return u.logout(args)
}

var logoutCommand = userCommand{
	usage: "codehub logout",
	about: `
Revoke the token "codehub login" stored, on its server, and remove it from
this computer.

When the server cannot be reached, the token is removed here all the same,
and the command says so and exits with status 1: the token stays valid on
the server until it expires or you revoke it in the dashboard (API tokens).
A token in CODEHUB_TOKEN is not touched.`,
	extra: exitStatusHelp,
}

// logoutWait bounds how long logout waits for the server's revocation.
const logoutWait = 15 * time.Second

func (u *userCLI) logout(args []string) int {
	fs := logoutCommand.flagSet("logout", u.stdout, u.stderr)
	pos, help, err := parseArgs(fs, args)
	switch {
	case help:
		return exitOK
	case err != nil:
		return exitUsage
	case len(pos) != 0:
		fmt.Fprintln(u.stderr, "codehub logout: takes no arguments")
		return exitUsage
	}
	c, path, err := storedCredentials()
	if errors.Is(err, errNotLoggedIn) {
		fmt.Fprintln(u.stdout, "Not logged in.")
		return exitOK
	}
	if err != nil && path == "" {
		fmt.Fprintf(u.stderr, "codehub logout: %v\n", err)
		return exitFailed
	}
	// A damaged file holds no token to revoke; it is removed all the same.
	var revokeErr error
	if err == nil {
		ctx, cancel := context.WithTimeout(u.ctx, logoutWait)
		_, revokeErr = newClient(c).do(ctx, http.MethodDelete, "/api/v1/tokens/current", nil)
		cancel()
		var apiErr *apiError
		if errors.As(revokeErr, &apiErr) && apiErr.Status == http.StatusUnauthorized {
			// Already expired or revoked: nothing is left to end.
			revokeErr = nil
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(u.stderr, "codehub logout: remove %s: %v\n", path, err)
		return exitFailed
	}
	if err != nil {
		fmt.Fprintf(u.stdout, "Removed %s, which held no usable token.\n", path)
		return exitOK
	}
	if revokeErr != nil {
		fmt.Fprintf(u.stderr, "codehub logout: could not revoke the token on %s (%v); it is removed from this computer but stays valid there until it expires or is revoked in the dashboard\n", c.URL, revokeErr)
		return exitFailed
	}
	fmt.Fprintf(u.stdout, "Logged out: the token is revoked on %s and removed from %s.\n", c.URL, path)
	return exitOK
}
