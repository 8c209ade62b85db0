-- `orca retry`: run $1's row locked for the rest of the transaction, so
-- two retries of one run at once go one after the other, the second
-- seeing the first's `rerun` event (sql/run_retry.sql). No row: no such
-- run.
SELECT id FROM orca.runs WHERE id = $1 FOR NO KEY UPDATE
