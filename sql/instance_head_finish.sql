-- How attempt ($1, $2), run by its head, ended: the parameters of sql/run_finish.sql.
SELECT orca.instance_head_finish($1, $2, $3, $4, $5, $6, $7, $8, $9::float8) AS state
