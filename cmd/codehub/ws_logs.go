package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"
)

// logEntry is one line of a workspace's log.
type logEntry struct {
	Time    time.Time `json:"time"`
	Event   string    `json:"event"`
	Message string    `json:"message"`
}

// workspaceLog is the log a workspace's current state tells: its
// creation, the last change of its desired state, each condition's last
// transition (the steps of a start: home ready, process running, editor
// answering), a failed attempt with the retry planned, and where it is
// now, in time order after the creation. The API keeps no history beyond these.
func workspaceLog(ws wsInfo) []logEntry {
	entries := []logEntry{{Time: ws.CreatedAt, Event: "created", Message: "created with image " + ws.Image}}
	if ws.DesiredAt != nil {
		entries = append(entries, logEntry{Time: *ws.DesiredAt, Event: "desired",
			Message: fmt.Sprintf("%s asked for %s", causeWords(ws.DesiredBy), ws.DesiredState)})
	}
	names := make([]string, 0, len(ws.Conditions))
	for name := range ws.Conditions {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		c := ws.Conditions[name]
		msg := name + " is " + c.Status
		if c.Reason != "" {
			msg += ": " + c.Reason
		}
		if c.Message != "" {
			msg += " (" + c.Message + ")"
		}
		entries = append(entries, logEntry{Time: c.LastTransitionTime, Event: "condition", Message: msg})
	}
	if ws.ErrorReason != nil {
		msg := fmt.Sprintf("attempt %d failed: %s", ws.ErrorCount, *ws.ErrorReason)
		if ws.ErrorMessage != nil && *ws.ErrorMessage != "" {
			msg += " (" + *ws.ErrorMessage + ")"
		}
		if ws.NextAttemptAt != nil && ws.Phase != "ERROR" {
			msg += "; next attempt at " + ws.NextAttemptAt.UTC().Format(time.RFC3339)
		}
		entries = append(entries, logEntry{Time: ws.UpdatedAt, Event: "error", Message: msg})
	}
	entries = append(entries, stateEntry(ws))
	// The creation comes first even when the engine's clock put a
	// condition a moment before it.
	sort.SliceStable(entries[1:], func(i, j int) bool { return entries[1+i].Time.Before(entries[1+j].Time) })
	return entries
}

func stateEntry(ws wsInfo) logEntry {
	msg := "phase " + ws.Phase
	if ws.Operation != "" && ws.Operation != "NONE" {
		msg += ", operation " + ws.Operation
	}
	if ws.DesiredState != "" {
		msg += ", desired " + ws.DesiredState
	}
	return logEntry{Time: ws.UpdatedAt, Event: "state", Message: msg}
}

func causeWords(by string) string {
	switch by {
	case "idle":
		return "the idle stop"
	case "schedule":
		return "the autostart schedule"
	}
	return "the owner"
}

// logPrinter prints entries it has not printed yet; the state line
// whenever it changed.
type logPrinter struct {
	u         *userCLI
	asJSON    bool
	seen      map[logEntry]bool
	lastState string
}

func (p *logPrinter) print(entries []logEntry) error {
	for _, e := range entries {
		if e.Event == "state" {
			if e.Message == p.lastState {
				continue
			}
			p.lastState = e.Message
		} else if p.seen[e] {
			continue
		}
		p.seen[e] = true
		if p.asJSON {
			b, err := json.Marshal(e)
			if err != nil {
				return err
			}
			fmt.Fprintf(p.u.stdout, "%s\n", b)
			continue
		}
		fmt.Fprintf(p.u.stdout, "%s  %-9s  %s\n", e.Time.UTC().Format(time.RFC3339), e.Event, e.Message)
	}
	return nil
}

func (u *userCLI) wsLogs(c *client, ref string, follow, asJSON bool) error {
	ws, err := u.resolve(c, ref)
	if err != nil {
		return err
	}
	p := &logPrinter{u: u, asJSON: asJSON, seen: map[logEntry]bool{}}
	if err := p.print(workspaceLog(ws)); err != nil || !follow {
		return err
	}
	err = u.followWorkspace(c, ws, p)
	if u.ctx.Err() != nil {
		// Ctrl-C is how following ends.
		return nil
	}
	return err
}

// followWorkspace reads the event stream and prints the workspace's
// changes until it is deleted or the command is stopped.
func (u *userCLI) followWorkspace(c *client, ws wsInfo, p *logPrinter) error {
	req, err := http.NewRequestWithContext(u.ctx, http.MethodGet, c.base+"/api/v1/events", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+c.token)
	// The stream lasts as long as it is followed: no overall timeout.
	res, err := (&http.Client{Transport: c.http.Transport}).Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return answerError(res.StatusCode, nil)
	}
	version := ws.Version
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var event string
	var data strings.Builder
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		case line == "":
			var got wsInfo
			if data.Len() > 0 && json.Unmarshal([]byte(data.String()), &got) == nil && got.ID == ws.ID {
				switch event {
				case "workspace_deleted":
					return p.print([]logEntry{{Time: time.Now(), Event: "deleted", Message: "the workspace was deleted"}})
				case "workspace_updated":
					if got.Version > version {
						version = got.Version
						if err := p.print(workspaceLog(got)); err != nil {
							return err
						}
					}
				}
			}
			event = ""
			data.Reset()
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read the event stream: %w", err)
	}
	return errors.New("the server ended the event stream")
}
