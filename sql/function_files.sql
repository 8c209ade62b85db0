-- The version of each sql/functions file the database has: its name and
-- the SHA-256 of its text (see migration 25).
SELECT name, hash FROM orca.function_files
