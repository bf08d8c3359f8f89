-- An administrator may stop or archive any user's workspace; the owner
-- is told so (desired_by = 'admin').
ALTER TABLE workspaces
    DROP CONSTRAINT workspaces_desired_by_check,
    ADD CONSTRAINT workspaces_desired_by_check CHECK (desired_by IN ('user', 'idle', 'schedule', 'admin'));
