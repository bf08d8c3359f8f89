package ports

import (
	"errors"
	"testing"
)

func TestDecide(t *testing.T) {
	cases := []struct {
		stored, limit Level
		viewer        Viewer
		want          Access
	}{
		{Owner, Public, OwnerViewer, Allow},
		{Owner, Public, User, Refuse},
		{Owner, Public, Anonymous, LogIn},
		{Authenticated, Public, OwnerViewer, Allow},
		{Authenticated, Public, User, Allow},
		{Authenticated, Public, Anonymous, LogIn},
		{Public, Public, User, Allow},
		{Public, Public, Anonymous, Allow},
		// A cap lowered after the port was shared wider holds.
		{Public, Authenticated, Anonymous, LogIn},
		{Public, Authenticated, User, Allow},
		{Public, Owner, User, Refuse},
		{Authenticated, Owner, User, Refuse},
		{Public, Owner, OwnerViewer, Allow},
		// Nothing stored is the default, owner.
		{"", Public, User, Refuse},
		{"", Public, Anonymous, LogIn},
		{"", Public, OwnerViewer, Allow},
		// An unknown value shares nothing.
		{"everyone", Public, Anonymous, LogIn},
		{"everyone", Public, User, Refuse},
	}
	for _, c := range cases {
		if got := Decide(c.stored, c.limit, c.viewer); got != c.want {
			t.Errorf("Decide(%q, cap %q, viewer %d) = %d, want %d", c.stored, c.limit, c.viewer, got, c.want)
		}
	}
}

func TestViewerOf(t *testing.T) {
	cases := []struct {
		user, owner string
		want        Viewer
	}{
		{"", "u1", Anonymous},
		{"u1", "u1", OwnerViewer},
		{"u2", "u1", User},
	}
	for _, c := range cases {
		if got := ViewerOf(c.user, c.owner); got != c.want {
			t.Errorf("ViewerOf(%q, %q) = %d, want %d", c.user, c.owner, got, c.want)
		}
	}
}

func TestCheckSet(t *testing.T) {
	cases := []struct {
		level, limit Level
		ok           bool
	}{
		{Owner, Owner, true},
		{Authenticated, Owner, false},
		{Public, Owner, false},
		{Authenticated, Authenticated, true},
		{Public, Authenticated, false},
		{Public, Public, true},
		{Owner, Public, true},
	}
	for _, c := range cases {
		err := CheckSet(c.level, c.limit)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrAboveCap)) {
			t.Errorf("CheckSet(%q, %q) = %v, want ok %v", c.level, c.limit, err, c.ok)
		}
	}
}

func TestParseLevel(t *testing.T) {
	for _, l := range Levels {
		if got, err := ParseLevel(string(l)); err != nil || got != l {
			t.Errorf("ParseLevel(%q) = %q, %v", l, got, err)
		}
	}
	for _, s := range []string{"", "Public", "private", "owner "} {
		if _, err := ParseLevel(s); !errors.Is(err, ErrUnknownLevel) {
			t.Errorf("ParseLevel(%q) = %v, want ErrUnknownLevel", s, err)
		}
	}
}

func TestCheckPort(t *testing.T) {
	for _, p := range []int{1, 80, 8000, 65535} {
		if err := CheckPort(p); err != nil {
			t.Errorf("CheckPort(%d) = %v", p, err)
		}
	}
	for _, p := range []int{0, -1, 65536, 100000} {
		if err := CheckPort(p); !errors.Is(err, ErrInvalidPort) {
			t.Errorf("CheckPort(%d) = %v, want ErrInvalidPort", p, err)
		}
	}
}
