package controller

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// userTimeoutControl sets TCP_USER_TIMEOUT on the leader connection: data
// left unacknowledged that long closes the socket, so a leader cut off from
// the database notices within seconds instead of the kernel's minutes.
func userTimeoutControl(timeout time.Duration) func(network, address string, c syscall.RawConn) error {
	if timeout <= 0 {
		return nil
	}
	return func(network, address string, c syscall.RawConn) error {
		if network != "tcp" && network != "tcp4" && network != "tcp6" {
			return nil
		}
		var sockErr error
		err := c.Control(func(fd uintptr) {
			sockErr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(timeout.Milliseconds()))
		})
		if err != nil {
			return err
		}
		return sockErr
	}
}
