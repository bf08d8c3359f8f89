package identity

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestBearerToken(t *testing.T) {
	for _, tc := range []struct {
		header, secret string
		present        bool
	}{
		{"", "", false},
		{"Bearer codehub_x", "codehub_x", true},
		{"bearer  codehub_x ", "codehub_x", true},
		{"Basic YTpi", "", true},
		{"Bearer", "", true},
	} {
		h := http.Header{}
		if tc.header != "" {
			h.Set("Authorization", tc.header)
		}
		secret, present := BearerToken(h)
		if secret != tc.secret || present != tc.present {
			t.Errorf("%q: (%q, %v), want (%q, %v)", tc.header, secret, present, tc.secret, tc.present)
		}
	}
}

func TestWellFormedSecret(t *testing.T) {
	secret, err := newTokenSecret()
	if err != nil {
		t.Fatal(err)
	}
	for s, want := range map[string]bool{
		secret:                                  true,
		secret + "A":                            false,
		secret[:len(secret)-1]:                  false,
		strings.TrimPrefix(secret, TokenPrefix): false,
		TokenPrefix + strings.Repeat("!", 43):   false,
		"":                                      false,
	} {
		if got := wellFormedSecret(s); got != want {
			t.Errorf("wellFormedSecret(%q) = %v", s, got)
		}
	}
}

func TestLoginBackoffSchedule(t *testing.T) {
	cases := map[int]time.Duration{
		0: 0, 1: 0, 2: 0,
		3: time.Second, 4: 2 * time.Second, 5: 4 * time.Second, 12: 512 * time.Second,
		13: 15 * time.Minute, 100: 15 * time.Minute,
	}
	for n, want := range cases {
		if got := clientBackoff.after(n); got != want {
			t.Errorf("clientBackoff.after(%d) = %v, want %v", n, got, want)
		}
	}
	for n, want := range map[int]time.Duration{19: 0, 20: time.Second, 25: 32 * time.Second, 26: time.Minute, 1000: time.Minute} {
		if got := userBackoff.after(n); got != want {
			t.Errorf("userBackoff.after(%d) = %v, want %v", n, got, want)
		}
	}
}

func TestPasswordHash(t *testing.T) {
	h, err := HashPassword("s3cret")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Fatalf("hash %q is not PHC argon2id with our parameters", h)
	}
	other, _ := HashPassword("s3cret")
	if other == h {
		t.Fatal("two hashes of one password are equal: salt not random")
	}
	for pw, want := range map[string]bool{"s3cret": true, "s3cret ": false, "": false, "S3cret": false} {
		ok, err := VerifyPassword(h, pw)
		if err != nil || ok != want {
			t.Errorf("VerifyPassword(%q) = %v, %v", pw, ok, err)
		}
	}
	for _, bad := range []string{"", "plain", "$argon2i$v=19$m=1,t=1,p=1$c2FsdA$aGFzaA", "$argon2id$v=18$m=1,t=1,p=1$c2FsdA$aGFzaA", "$argon2id$v=19$m=1,t=1,p=1$!!$aGFzaA"} {
		if _, err := VerifyPassword(bad, "x"); err == nil {
			t.Errorf("VerifyPassword accepted hash %q", bad)
		}
	}
}

func TestVerifierMatchesChallenge(t *testing.T) {
	// The example of RFC 7636, appendix B.
	const verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
	const challenge = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
	for _, tc := range []struct {
		verifier, challenge string
		want                bool
	}{
		{verifier, challenge, true},
		{verifier + "x", challenge, false},
		{"", challenge, false},
		{verifier, "", false},
		{challenge, challenge, false},
	} {
		if got := verifies(tc.verifier, tc.challenge); got != tc.want {
			t.Errorf("verifies(%q, %q) = %v", tc.verifier, tc.challenge, got)
		}
	}
	for c, want := range map[string]bool{
		challenge:               true,
		challenge[:42]:          false,
		challenge + "A":         false,
		strings.Repeat("!", 43): false,
		"":                      false,
	} {
		if got := wellFormedChallenge(c); got != want {
			t.Errorf("wellFormedChallenge(%q) = %v", c, got)
		}
	}
}
