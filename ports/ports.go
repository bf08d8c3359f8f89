// Package ports holds the share levels of a workspace's ports and the
// decisions over them: which level an operator's cap lets an owner set,
// and who may reach a port at the level it has. It does no I/O; the
// store keeps the levels and the proxy and the API act on the decisions.
package ports

import (
	"errors"
	"fmt"
)

// Level is how widely a port is shared.
type Level string

const (
	// Owner: only the workspace's owner reaches the port (the default).
	Owner Level = "owner"
	// Authenticated: any logged-in CodeHub user reaches it.
	Authenticated Level = "authenticated"
	// Public: anyone reaches it, without logging in.
	Public Level = "public"
)

// Levels are the share levels, narrowest first.
var Levels = []Level{Owner, Authenticated, Public}

// ErrUnknownLevel is a level that is none of Levels.
var ErrUnknownLevel = errors.New("unknown share level")

// ErrAboveCap is a level wider than the operator allows.
var ErrAboveCap = errors.New("share level above the operator's cap")

// ErrInvalidPort is a port number outside 1–65535.
var ErrInvalidPort = errors.New("port must be between 1 and 65535")

// ParseLevel reads a level as the API and the configuration spell it.
func ParseLevel(s string) (Level, error) {
	for _, l := range Levels {
		if string(l) == s {
			return l, nil
		}
	}
	return "", fmt.Errorf("%w %q: want one of owner, authenticated, public", ErrUnknownLevel, s)
}

// rank orders the levels; an unknown level ranks as Owner, the narrowest,
// so a value that somehow got past parsing shares nothing.
func (l Level) rank() int {
	switch l {
	case Authenticated:
		return 1
	case Public:
		return 2
	}
	return 0
}

// CheckPort reports a port number no TCP listener can have.
func CheckPort(port int) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("%w (got %d)", ErrInvalidPort, port)
	}
	return nil
}

// CheckSet reports whether an owner may set level under the operator's
// cap.
func CheckSet(level, limit Level) error {
	if level.rank() > limit.rank() {
		return fmt.Errorf("%w: %q is wider than the allowed %q", ErrAboveCap, level, limit)
	}
	return nil
}

// Effective is the level a port has in force: the stored one, narrowed to
// the operator's cap (a cap lowered after a port was shared wider takes
// effect without rewriting what owners chose).
func Effective(stored, limit Level) Level {
	if stored.rank() > limit.rank() {
		stored = limit
	}
	if stored.rank() == 0 {
		return Owner
	}
	return stored
}

// Viewer is who asks for a port, as far as sharing is concerned.
type Viewer int

const (
	// Anonymous: no valid session.
	Anonymous Viewer = iota
	// User: logged in, not the owner.
	User
	// OwnerViewer: the workspace's owner.
	OwnerViewer
)

// ViewerOf classifies the user of a request: user is empty without a
// valid session.
func ViewerOf(user, owner string) Viewer {
	switch {
	case user == "":
		return Anonymous
	case user == owner:
		return OwnerViewer
	}
	return User
}

// Access is what the proxy does with a request for a port.
type Access int

const (
	// Allow: the request reaches the port.
	Allow Access = iota
	// LogIn: refused until the visitor logs in.
	LogIn
	// Refuse: refused; logging in as this user changes nothing.
	Refuse
)

// Decide says whether v reaches a port of level stored under the cap
// limit. The owner always does: sharing widens, it never locks the owner
// out.
func Decide(stored, limit Level, v Viewer) Access {
	level := Effective(stored, limit)
	switch {
	case v == OwnerViewer, level == Public:
		return Allow
	case v == Anonymous:
		return LogIn
	case level == Authenticated:
		return Allow
	}
	return Refuse
}
