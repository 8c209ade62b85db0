-- Scheduler $1 drains ($2: why): it gives up the lead and starts nothing more.
WITH s AS (
    UPDATE orca.schedulers SET leads = false, draining = true
    WHERE id = $1 AND NOT draining
    RETURNING id, host, pid
)
INSERT INTO orca.events (kind, why)
SELECT 'draining', format('scheduler %s on %s pid %s: %s', id, host, pid, $2::text) FROM s
