// Package e2e holds end-to-end tests that drive a real `codehub server`
// (single-machine backend, real code-server, PostgreSQL, Redis and S3) from
// a headless Chromium, the way a user does. It has no non-test code beyond
// this comment: everything lives in the tests.
package e2e
