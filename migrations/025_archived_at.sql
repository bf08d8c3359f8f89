-- The recovery point (docs/nomad.md, "Operating a fleet"): when the archive
-- at archive_key was made, so everything the home held then is in S3. NULL
-- for a workspace never archived, and for archives made before this
-- column, whose time is read from the op id in their key instead.
ALTER TABLE workspaces ADD COLUMN archived_at timestamptz;

-- An empty run_id with no archive now means that no program ever ran on the
-- home, whose volume a drain may then give up (workspace.NeverRan). A home
-- stopped since before run ids were recorded may have run: mark it as
-- having run, so it is kept and archived like any other.
UPDATE workspaces SET run_id = 'ran-before-run-ids'
    WHERE run_id = '' AND archive_key IS NULL AND phase IN ('STANDBY', 'ERROR') AND deleted_at IS NULL;
