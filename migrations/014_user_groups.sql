-- The groups a user's identity provider gave at their last single sign-on
-- login; templates may be limited to groups.
ALTER TABLE users ADD COLUMN groups text[] NOT NULL DEFAULT '{}';
