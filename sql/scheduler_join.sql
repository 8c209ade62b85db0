-- Adds this process's row ($1 host, $2 pid, $3 image, $4 migrations known).
WITH s AS (
    INSERT INTO orca.schedulers (host, pid, image, migrations, backend)
    VALUES ($1, $2, $3, $4, pg_backend_pid())
    RETURNING id, host, pid, image
), e AS (
    INSERT INTO orca.events (kind, why)
    SELECT 'joined', format('scheduler %s on %s pid %s, image %s', id, host, pid, coalesce(nullif(image, ''), '-')) FROM s
)
SELECT id FROM s
