SET LOCAL client_min_messages = warning;
CREATE SCHEMA IF NOT EXISTS orca;
CREATE TABLE IF NOT EXISTS orca.migrations (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);
