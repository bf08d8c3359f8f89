package main

import (
	"fmt"
	"io"

	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/doctor"
	"github.com/codehub-io/codehub/nomad"
)

// runDoctor implements `codehub doctor -config FILE [-json]`: the preflight
// an operator runs before the first start and whenever something looks
// wrong. It tries every dependency the configuration names, as the server
// uses it, and changes nothing that stays. Exit status: 0 when nothing
// failed (warnings allowed), 1 when a check failed, 2 on a usage error.
func runDoctor(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs, path := configFlags("doctor", stderr)
	asJSON := fs.Bool("json", false, "write the findings as JSON")
	tolerance := fs.Duration("clock-tolerance", doctor.DefaultClockTolerance, "how far another machine's clock may be off")
	if !parseConfigCommand(fs, path, args, stderr) {
		return 2
	}
	if *tolerance <= 0 {
		fmt.Fprintln(stderr, "codehub doctor: -clock-tolerance must be positive")
		return 2
	}
	ctx, stop := signalContext()
	defer stop()

	var findings []doctor.Finding
	cfg, err := config.Load(*path)
	if err != nil {
		findings = []doctor.Finding{{Check: "config", Status: doctor.Fail, Detail: err.Error(),
			Fix: "correct the configuration file; codehub config validate -config FILE lists every problem", Doc: doctor.DocDeployment}}
	} else {
		findings = append(findings, doctor.Finding{Check: "config", Status: doctor.OK, Detail: *path + " is valid"})
		findings = append(findings, doctor.Services(ctx, cfg, doctor.Options{ClockTolerance: *tolerance})...)
		if cfg.Backend != nil && cfg.Backend.Nomad != nil {
			findings = append(findings, nomad.Preflight(ctx, cfg, *tolerance)...)
		}
	}
	write := doctor.WriteText
	if *asJSON {
		write = doctor.WriteJSON
	}
	if err := write(stdout, findings); err != nil {
		fmt.Fprintln(stderr, "codehub doctor:", err)
		return 1
	}
	if doctor.Failed(findings) {
		return 1
	}
	return 0
}
