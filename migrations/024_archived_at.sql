-- The recovery point (docs/nomad.md, "Operating a fleet"): when the archive
-- at archive_key was made, so everything the home held then is in S3. NULL
-- for a workspace never archived, and for archives made before this
-- column, whose time is read from the op id in their key instead.
ALTER TABLE workspaces ADD COLUMN archived_at timestamptz;
