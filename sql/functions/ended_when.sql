-- orca.ended_when(timestamp with time zone,double precision), made by migration 20.
-- When an attempt that started at p_started ended, its process having
-- ended p_ago seconds ago by its supervisor's clock: now() less p_ago,
-- within [p_started, now()]; now() for no ago (NULL, zero, negative). (A
-- plain SQL expression, inlined where it is used; every operator named
-- with its schema, so a caller's search_path can't stand in for one.)
CREATE OR REPLACE FUNCTION orca.ended_when(p_started timestamptz, p_ago float8) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN p_ago OPERATOR(pg_catalog.>) 0::float8
                THEN LEAST(pg_catalog.now(), GREATEST(p_started,
                         pg_catalog.now() OPERATOR(pg_catalog.-)
                         pg_catalog.make_interval(secs => LEAST(p_ago, 31536000::float8))))
                ELSE pg_catalog.now() END
$$;
REVOKE ALL ON FUNCTION orca.ended_when(timestamp with time zone,double precision) FROM PUBLIC;
