-- A worker's round trip: writes the ends of its attempts that ended ($9
-- ids, $10 starts, $11 states, $12 exit codes, $13 signals, $14 whys, $15
-- outputs, $16 alert bodies, $17 how many seconds ago each process ended
-- by the supervisor's clock, as sql/runs_finish.sql's $9), marks this machine seen, beats its attempts
-- ($1 ids, $2 starts, $3 pids), appends their new output ($4 ids, $5
-- starts, $6 where each piece begins in its attempt's output, $7 the
-- bytes) and claims up to $8 queued runs of its pool. A row per end (kind
-- 'ended': id, start, the run's state now or NULL), per attempt still
-- running here ('beaten': id, cancel) and per run claimed ('claimed': id,
-- start, pipeline, args and the pipeline's spec).
SELECT kind, id, start, cancel, state, pipeline, args, spec
FROM orca.worker_round($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
