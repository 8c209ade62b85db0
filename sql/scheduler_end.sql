-- Scheduler $1 has ended: gone at once.
WITH s AS (
    UPDATE orca.schedulers SET ended_at = now(), leads = false, running = '{}', backend = NULL
    WHERE id = $1 AND ended_at IS NULL
    RETURNING id, host, pid
)
INSERT INTO orca.events (kind, why)
SELECT 'ended', format('scheduler %s on %s pid %s', id, host, pid) FROM s
