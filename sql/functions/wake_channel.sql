-- orca.wake_channel(text,text), made by migration 27.
-- The NOTIFY channel of pool or instance `p_name` (`p_kind`: 'pool' or
-- 'instance'): `orca_pool_` or `orca_inst_` and the first 32 hex digits of
-- the SHA-256 of this database's wake secret and the name. No login may
-- call it: a pool's machines learn their own pool's channel from
-- orca.worker_wake(), an instance its own from orca.instance_wake().
CREATE OR REPLACE FUNCTION orca.wake_channel(p_kind text, p_name text) RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE p_kind WHEN 'pool' THEN 'orca_pool_' ELSE 'orca_inst_' END
        || left(encode(sha256(convert_to(s.secret || ':' || p_kind || ':' || p_name, 'UTF8')), 'hex'), 32)
    FROM orca.wake_secret s
$$;
REVOKE ALL ON FUNCTION orca.wake_channel(text,text) FROM PUBLIC;
