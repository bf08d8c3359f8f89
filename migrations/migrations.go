// Package migrations holds the numbered SQL files that define the database
// schema, embedded in the binary. It only carries the files; store applies them.
package migrations

import "embed"

// FS holds every NNN_name.sql file of the schema, applied in name order.
//
//go:embed *.sql
var FS embed.FS
