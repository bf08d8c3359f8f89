package config

import (
	"io"
	"os"

	"github.com/hashicorp/go-hclog"
)

// NewLogger builds the root logger from log_level and log_json, writing to
// stderr. Subsystems take named children of it (logger.Named("controller")).
func NewLogger(c *Config) hclog.Logger {
	return c.newLogger(os.Stderr)
}

func (c *Config) newLogger(out io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       "codehub",
		Level:      hclog.LevelFromString(c.LogLevel),
		JSONFormat: c.LogJSON,
		Output:     out,
	})
}
