-- Whether orca's schema is there (false before the first `orca migrate`);
-- needs no privilege on its tables.
SELECT to_regclass('orca.migrations') IS NOT NULL
