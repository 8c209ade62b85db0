-- Why the queued runs among $1 wait, as far as the database can tell: for
-- each, its pipeline, whether that is paused, whether a live scheduler
-- leads (the lead lock $2 is held and, where scheduler rows say who leads
-- (overlap on), one of those was seen within the stale limit $3 (s) by the
-- database's clock), its retry (failures so far, the attempts its retries
-- allow, and when it may start: not_before, if still ahead, with its date
-- when that is not today (UTC)), its
-- pipeline's max_runs (max_fills for a fill run) with the runs of its kind
-- running (how many, and the first few ids), and for a worker:<pool>
-- run its pool: registered, its machines (live; one booting, if any),
-- max_machines, the room its seen workers have left, and the scaler's
-- status line. src/waits.rs decides from these.
WITH led AS (
    SELECT EXISTS (SELECT 1 FROM pg_locks l
                   WHERE l.locktype = 'advisory' AND l.granted
                     AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                     AND l.classid = ($2::bigint >> 32)::oid
                     AND l.objid = ($2::bigint & 4294967295)::oid AND l.objsubid = 1)
           AND (NOT EXISTS (SELECT 1 FROM orca.schedulers WHERE ended_at IS NULL AND leads)
                OR EXISTS (SELECT 1 FROM orca.schedulers
                           WHERE ended_at IS NULL AND leads
                             AND seen_at > now() - make_interval(secs => $3))) AS led
)
SELECT r.id, r.pipeline, r.fill, p.paused, led.led,
       r.failures, 1 + coalesce((p.spec ->> 'retries')::integer, 0) AS tries,
       CASE WHEN r.not_before > now()
            THEN to_char(r.not_before AT TIME ZONE 'UTC',
                         CASE WHEN (r.not_before AT TIME ZONE 'UTC')::date = (now() AT TIME ZONE 'UTC')::date
                              THEN 'HH24:MI:SS' ELSE 'YYYY-MM-DD HH24:MI:SS' END) END AS retry_at,
       CASE WHEN r.fill THEN coalesce((p.spec ->> 'max_fills')::integer, 10)
            ELSE p.max_runs END AS max_runs,
       b.running, b.running_ids,
       CASE WHEN p.placement LIKE 'worker:%' THEN substr(p.placement, 8) END AS pool,
       pl.name IS NOT NULL AND NOT pl.retired AS pool_registered,
       coalesce(pl.status, '') AS pool_status,
       (pl.spec ->> 'max_machines')::integer AS max_machines,
       m.machines, m.booting, m.room
FROM orca.runs r
JOIN orca.pipelines p ON p.name = r.pipeline
CROSS JOIN led
CROSS JOIN LATERAL (
    SELECT count(*) AS running,
           (array_agg(x.id ORDER BY x.id))[1:5] AS running_ids
    FROM orca.runs x
    WHERE x.pipeline = r.pipeline AND x.state = 'running' AND x.fill = r.fill
) b
LEFT JOIN orca.pools pl ON p.placement = 'worker:' || pl.name
LEFT JOIN LATERAL (
    SELECT count(*) AS machines,
           min(pm.name) FILTER (WHERE pm.seen_at IS NULL) AS booting,
           coalesce(sum(pm.slots) FILTER (WHERE pm.seen_at IS NOT NULL AND pm.ending IS NULL), 0)
           - (SELECT count(*) FROM orca.runs x JOIN orca.pool_machines y ON y.id = x.machine
              WHERE y.pool = pl.name AND y.ended_at IS NULL AND y.ending IS NULL
                AND y.seen_at IS NOT NULL AND x.state = 'running') AS room
    FROM orca.pool_machines pm
    WHERE pm.pool = pl.name AND pm.ended_at IS NULL
) m ON pl.name IS NOT NULL
WHERE r.id = ANY ($1::bigint[]) AND r.state = 'queued'
