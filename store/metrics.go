package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// CountWorkspacesByPhase returns the number of live workspaces per stored phase.
func CountWorkspacesByPhase(ctx context.Context, q Querier) (map[string]int, error) {
	rows, err := q.Query(ctx, `SELECT phase, count(*) FROM workspaces WHERE deleted_at IS NULL GROUP BY phase`)
	if err != nil {
		return nil, fmt.Errorf("count workspaces: %w", err)
	}
	counts := map[string]int{}
	var phase string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&phase, &n}, func() error {
		counts[phase] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count workspaces: %w", err)
	}
	return counts, nil
}
