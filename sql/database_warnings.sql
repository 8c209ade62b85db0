-- What leaves orca open to its machine and instance logins that only the
-- administrator can close (docs/security.md's hardening), and whether
-- orca's role (current_user) may still run the lock functions it uses; one
-- row of facts. Logins have what PUBLIC has: orca_worker stands for them.
SELECT current_setting('max_prepared_transactions')::integer AS prepared,
       current_setting('server_version_num')::integer AS version,
       EXISTS (SELECT 1 FROM pg_catalog.pg_proc p
               WHERE p.pronamespace = 'pg_catalog'::regnamespace
                 AND p.proname IN ('pg_advisory_lock', 'pg_advisory_lock_shared',
                                   'pg_try_advisory_lock', 'pg_try_advisory_lock_shared',
                                   'pg_advisory_xact_lock', 'pg_advisory_xact_lock_shared',
                                   'pg_try_advisory_xact_lock', 'pg_try_advisory_xact_lock_shared')
                 AND has_function_privilege('orca_worker', p.oid, 'EXECUTE')) AS advisory,
       EXISTS (SELECT 1 FROM pg_catalog.pg_proc p
               WHERE p.pronamespace = 'pg_catalog'::regnamespace
                 AND p.proname IN ('lo_create', 'lo_creat', 'lo_from_bytea')
                 AND has_function_privilege('orca_worker', p.oid, 'EXECUTE')) AS large_objects,
       ARRAY(SELECT d.datname::text FROM pg_catalog.pg_database d
             WHERE d.datallowconn AND d.datname <> current_database()
               AND has_database_privilege('orca_worker', d.oid, 'CONNECT')
             ORDER BY d.datname) AS databases,
       EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n
               WHERE n.nspname = 'public'
                 AND has_schema_privilege('orca_worker', n.oid, 'CREATE')) AS public_create,
       has_function_privilege('pg_advisory_lock(bigint)', 'EXECUTE') AS lead_wait,
       has_function_privilege('pg_try_advisory_lock(bigint)', 'EXECUTE')
         AND has_function_privilege('pg_try_advisory_xact_lock(bigint)', 'EXECUTE') AS lead_try
