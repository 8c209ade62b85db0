-- The id the next machine gets (it names the machine and its role).
SELECT nextval(pg_get_serial_sequence('orca.pool_machines', 'id')) AS id
