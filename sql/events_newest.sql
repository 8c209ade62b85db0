-- The newest event's id (0: none yet), where `orca events -f` begins.
SELECT coalesce(max(id), 0) AS id FROM orca.events
