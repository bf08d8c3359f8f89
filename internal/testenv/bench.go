package testenv

import (
	"os"
	"strconv"
	"testing"
)

// Count reads a benchmark's size from the environment variable name, def
// when it is unset. A value that is not a positive integer fails the
// benchmark: run on the default instead, it would record a measurement of
// a size nobody asked for.
func Count(tb testing.TB, name string, def int) int {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		tb.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}
