//go:build !linux

package controller

import (
	"syscall"
	"time"
)

// userTimeoutControl: TCP_USER_TIMEOUT is Linux-only; elsewhere the
// keepalive settings alone bound how long a dead session goes unnoticed.
func userTimeoutControl(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
