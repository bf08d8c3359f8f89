package main

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

// healthCheck probes one dependency; nil means reachable.
type healthCheck struct {
	name  string
	probe func(ctx context.Context) error
}

type healthResult struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// healthHandler answers GET /api/v1/health with the reachability of every
// dependency: 200 when all are reachable, 503 otherwise.
func healthHandler(checks []healthCheck) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		results := make(map[string]healthResult, len(checks))
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, c := range checks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res := healthResult{OK: true}
				if err := c.probe(ctx); err != nil {
					res = healthResult{Error: err.Error()}
				}
				mu.Lock()
				results[c.name] = res
				mu.Unlock()
			}()
		}
		wg.Wait()
		status, code := "ok", http.StatusOK
		for _, res := range results {
			if !res.OK {
				status, code = "unavailable", http.StatusServiceUnavailable
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]any{"status": status, "checks": results})
	})
}
