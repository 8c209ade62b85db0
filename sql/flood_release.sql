-- Releases this session's reserve (sql/flood_reserve.sql) for the
-- statement that follows: every session-level advisory lock it holds (the
-- session that guards holds no other).
SELECT pg_catalog.pg_advisory_unlock_all()
