-- An owner's autostart schedule: weekdays (bit d for weekday d, Sunday 0),
-- a wall-clock time "HH:MM" and an IANA time zone. autostart_done is the
-- last scheduled start acted on (or when the schedule was set), so each
-- start happens once. A scheduled start records desired_by = 'schedule'.
ALTER TABLE workspaces
    ADD COLUMN autostart_days smallint NOT NULL DEFAULT 0 CHECK (autostart_days BETWEEN 0 AND 127),
    ADD COLUMN autostart_at   text,
    ADD COLUMN autostart_tz   text,
    ADD COLUMN autostart_done timestamptz,
    DROP CONSTRAINT workspaces_desired_by_check,
    ADD CONSTRAINT workspaces_desired_by_check CHECK (desired_by IN ('user', 'idle', 'schedule'));
