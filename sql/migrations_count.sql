-- How many migrations the database has (its orca.migrations table must be
-- there: see sql/schema_present.sql; a CASE around it would not help, the
-- table is looked up when the statement is planned).
SELECT coalesce(max(version), 0) FROM orca.migrations
