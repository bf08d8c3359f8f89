-- Backups (docs/lifecycle.md). archive_run_id is the run whose writes the
-- archive at archive_key holds: run_id as it was when that archive was made
-- of the volume. A home whose run_id differs has run since, so it changed.
-- Empty for archives made before this column: every home that ever ran
-- then counts as changed once. op_backup marks an ARCHIVING that is a
-- backup: it keeps the volume.
ALTER TABLE workspaces
    ADD COLUMN archive_run_id text NOT NULL DEFAULT '',
    ADD COLUMN op_backup boolean NOT NULL DEFAULT false;
