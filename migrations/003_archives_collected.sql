-- Deleted workspaces whose archives the GC has removed to the last object.
-- The GC lists the archives of every deleted workspace until it finds none
-- left; from then on a row here leaves the workspace out of its passes.
CREATE TABLE archives_collected (
    workspace_id text PRIMARY KEY REFERENCES workspaces (id) ON DELETE CASCADE,
    collected_at timestamptz NOT NULL DEFAULT now()
);
