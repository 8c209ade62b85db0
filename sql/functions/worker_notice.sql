-- orca.worker_notice(text,text,timestamptz), made by migration 31.
-- This machine's worker heard a spot notice: p_kind 'interrupted' (p_action
-- terminate, stop or hibernate, at p_at) or 'draining' (a rebalance
-- recommendation, noticed at p_at). Marks the machine's row (an
-- interruption over a drain, never the other way), records the event once
-- per kind (`machine interrupted`, `machine draining`), and returns the
-- seconds left until p_at by the database's clock. Its inputs come from the
-- machine: the kind is checked, the action bounded, and the time held to
-- within a day before and ten minutes after now (EC2 gives two minutes).
CREATE OR REPLACE FUNCTION orca.worker_notice(p_kind text, p_action text, p_at timestamptz)
RETURNS float8 LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    m orca.pool_machines := orca.worker_machine();
BEGIN
    p_at := least(greatest(coalesce(p_at, now()), now() - interval '1 day'),
                  now() + interval '10 minutes');
    IF p_kind NOT IN ('interrupted', 'draining') THEN
        RAISE EXCEPTION 'a notice is interrupted or draining, not %', left(p_kind, 40)
            USING ERRCODE = '22023';
    END IF;
    IF p_kind = 'draining' AND m.notice IS NOT NULL
       OR p_kind = 'interrupted' AND m.notice = 'interrupted' THEN
        RETURN extract(epoch FROM p_at - now())::float8;
    END IF;
    UPDATE orca.pool_machines SET notice = p_kind, noticed_at = now(), notice_at = p_at
    WHERE id = m.id;
    INSERT INTO orca.events (kind, why)
    VALUES ('machine ' || p_kind,
            CASE WHEN p_kind = 'interrupted'
                 THEN format('machine %s of pool %s: spot interruption notice (%s at %s, in %ss): its runs are handed back',
                             m.name, m.pool, left(coalesce(p_action, '?'), 16),
                             to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS "UTC"'),
                             round(extract(epoch FROM p_at - now())::numeric))
                 ELSE format('machine %s of pool %s: rebalance recommendation (noticed at %s): it takes no more runs',
                             m.name, m.pool,
                             to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS "UTC"')) END);
    RETURN extract(epoch FROM p_at - now())::float8;
END
$$;
REVOKE ALL ON FUNCTION orca.worker_notice(text,text,timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION orca.worker_notice(text,text,timestamptz) TO orca_worker;
