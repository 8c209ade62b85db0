-- What leaves orca open to its machine and instance logins that only the
-- administrator can close (docs/security.md); one row of facts.
SELECT current_setting('max_prepared_transactions')::integer AS prepared,
       current_setting('server_version_num')::integer AS version,
       has_function_privilege('orca_worker', 'pg_advisory_lock(bigint)', 'EXECUTE')
         OR has_function_privilege('orca_worker', 'pg_advisory_lock(integer, integer)', 'EXECUTE') AS advisory
