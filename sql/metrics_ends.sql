-- The leader's count of starts, ends and retries of every run, whatever its
-- placement (local, a pool's worker, an EC2 head), read from the events
-- every few seconds while ORCA_METRICS_ADDR is set.
--
-- Ids are taken as transactions insert, not as they commit, so only
-- *settled* events are counted: up to the highest id whose event is over
-- 10 seconds old by the database's clock (as `orca events -f` settles; orca
-- writes its events in transactions far shorter, and a login's are ended
-- past ORCA_LOGIN_XACT_SECONDS). The counters so run 10 to 15 seconds behind.
--
-- $1: the last id counted; NULL when this leader starts counting, which
-- only says where to start (nothing before it is counted).
-- Returns `settled` (the next $1) on every row, and one row per pipeline
-- and kind with its count (no such row when there is nothing to count):
--   started; succeeded, failed, timed_out (a failure whose why says it ran
--   past its timeout), cancelled (a running attempt's, not a queued run's),
--   requeued (an attempt handed back: a lost machine, a stopping worker);
--   retried.
WITH s AS (
    SELECT CASE WHEN $1::bigint IS NULL
                THEN (SELECT coalesce(max(id), 0) FROM orca.events
                      WHERE at < now() - interval '10 seconds')
                ELSE (SELECT coalesce(max(id), $1::bigint) FROM orca.events
                      WHERE id > $1::bigint AND at < now() - interval '10 seconds')
           END AS settled
)
SELECT s.settled, c.pipeline, c.kind, c.n
FROM s
LEFT JOIN LATERAL (
    SELECT e.pipeline,
           CASE WHEN e.kind = 'failed' AND e.why LIKE 'timed out%' THEN 'timed_out'
                ELSE e.kind END AS kind,
           count(*)::float8 AS n
    FROM orca.events e
    WHERE $1::bigint IS NOT NULL AND e.id > $1::bigint AND e.id <= s.settled
      AND e.pipeline IS NOT NULL
      AND e.kind IN ('started', 'succeeded', 'failed', 'cancelled', 'requeued', 'retried')
      AND NOT (e.kind = 'cancelled'
               AND EXISTS (SELECT 1 FROM orca.runs r
                           WHERE r.id = e.run AND r.why = 'cancelled before it started'))
    GROUP BY 1, 2
) c ON true
