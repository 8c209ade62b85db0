-- How many migrations the database has: 0 before `orca migrate` ever ran.
SELECT CASE WHEN to_regclass('orca.migrations') IS NULL THEN 0
            ELSE (SELECT coalesce(max(version), 0) FROM orca.migrations) END
