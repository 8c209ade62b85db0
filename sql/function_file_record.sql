-- Records that version $2 (the SHA-256 of its text) of sql/functions/$1.sql
-- is the database's now.
INSERT INTO orca.function_files (name, hash) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET hash = excluded.hash, applied_at = now()
