-- Scheduler $1 took the lead (it holds LEAD_LOCK on this session).
WITH s AS (
    UPDATE orca.schedulers SET leads = true, lead_since = now(), backend = pg_backend_pid()
    WHERE id = $1
    RETURNING id, host, pid, image
), o AS (
    UPDATE orca.schedulers SET leads = false WHERE id <> $1 AND leads
)
INSERT INTO orca.events (kind, why)
SELECT 'lead taken', format('scheduler %s on %s pid %s, image %s', id, host, pid, coalesce(nullif(image, ''), '-')) FROM s
