-- The id the next instance gets (it names the instance and its login).
SELECT nextval(pg_get_serial_sequence('orca.instances', 'id')) AS id
