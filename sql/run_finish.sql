-- Records how attempt ($1, $2) ended (see orca.finish_attempt, migrations
-- 0010, 0011 and 0020). $3: succeeded, failed or cancelled; $4/$5: exit code or signal; $6:
-- why; $7: output tail; $8: the alert's body, should it be the final failure;
-- $9: how many seconds ago its process ended by the supervisor's clock
-- (NULL: not measured).
-- Retries, retry delay and alert URL come from the stored pipeline. Returns
-- the state the run is in (NULL: the attempt was no longer running).
SELECT orca.finish_attempt($1, $2, $3, $4, $5, $6, $7, $8, NULL::bigint, $9::float8) AS state
