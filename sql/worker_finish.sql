-- How attempt ($1, $2), run on this machine, ended: the parameters of
-- sql/run_finish.sql.
SELECT orca.worker_finish($1, $2, $3, $4, $5, $6, $7, $8, $9::float8) AS state
