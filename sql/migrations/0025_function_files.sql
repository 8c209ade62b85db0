-- Migration 25: each function of schema orca has its current definition in
-- one file, sql/functions/<name>.sql (issue 29 §3), applied by `orca
-- migrate` after the migrations when it changed. This table says which
-- version of each file the database has: the SHA-256 of the file as the
-- binary embeds it (without its whole-line comments).
CREATE TABLE orca.function_files (
    name        text PRIMARY KEY,
    hash        text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON TABLE orca.function_files FROM PUBLIC;
