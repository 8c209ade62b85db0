-- A worker's round trip: marks this machine seen, beats its attempts ($1
-- ids, $2 starts, $3 pids), appends their new output ($4 ids, $5 starts, $6
-- where each piece begins in its attempt's output, $7 the bytes) and claims
-- up to $8 queued runs of its pool. A row per attempt still running here
-- (claimed false: id, cancel) and per run claimed (claimed true: id, start,
-- pipeline, args and the pipeline's spec).
SELECT id, start, cancel, claimed, pipeline, args, spec
FROM orca.worker_round($1, $2, $3, $4, $5, $6, $7, $8)
