-- `orca run --each --wait`: how many of its runs have not ended yet. Its
-- runs are pipeline $1's with ids from $2 to $3 but for those of $4 (the
-- ids in between that are not the batch's: usually none). A pipeline's
-- count (runs_queued, runs_running, or the key's range: whichever, a look
-- reads at most the batch's range of ids, never other history).
SELECT (SELECT count(*) FROM orca.runs
        WHERE pipeline = $1 AND state = 'queued' AND id BETWEEN $2 AND $3 AND id <> ALL ($4))
     + (SELECT count(*) FROM orca.runs
        WHERE pipeline = $1 AND state = 'running' AND id BETWEEN $2 AND $3 AND id <> ALL ($4))
       AS going
