-- Records how each of several attempts ended, as sql/run_finish.sql does for
-- one, in one statement (orca.finish_attempts, one transaction): $1 run
-- ids, $2 starts, $3 states, $4 exit codes, $5 signals, $6 whys, $7 output
-- tails, $8 alert bodies, $9 how many seconds ago each process ended by
-- the supervisor's clock (NULL: not measured; ended_at is now() less it,
-- migration 0020); arrays of one length, one attempt at each place.
-- Returns each attempt's run id and the state its run is in (NULL: no
-- longer running), in order.
SELECT f.id, f.state
FROM orca.finish_attempts($1::bigint[], $2::integer[], $3::text[], $4::integer[], $5::integer[],
                          $6::text[], $7::bytea[], $8::jsonb[], NULL, $9::float8[]) f
