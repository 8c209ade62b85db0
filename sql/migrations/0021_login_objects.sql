-- Migration 21: nothing a machine or instance login makes outlives it
-- (issue 28 §3).
--
-- Where orca can't revoke the large object functions from PUBLIC (RDS), a
-- login may make large objects, give them to its group role (`ALTER LARGE
-- OBJECT … OWNER TO orca_worker`: it is a member) or make them as its group
-- (`SET ROLE orca_worker`); then `DROP OWNED BY` the login misses them, and
-- every login of the group may read them. It may also set default
-- privileges for its group (`ALTER DEFAULT PRIVILEGES FOR ROLE
-- orca_worker`), which outlive it too. Nothing else: it has no CREATE on
-- the database or any schema, TEMP is revoked (migration 5), and the
-- server-wide kinds need a superuser or CREATEROLE.
--
-- orca.login_objects_sweep(n) removes them: every large object owned by a
-- login (a direct member of orca_worker or orca_instance) or by those
-- groups is unlinked, and every default privilege entry of theirs is reset
-- to Postgres's default (which deletes it). orca's role may: it is a member
-- of every login it makes (migration 5), and through any of them of the
-- groups. So the sweep runs before a login is dropped (while it still
-- exists: the last login's drop is the last chance) and on the leader
-- every ORCA_LOGIN_XACT_SECONDS / 2. It waits on no lock for more than
-- 20 ms (a login keeping its objects locked, in transactions that take
-- turns, would hold up the tick: a locked one is left for the next sweep,
-- and goes at the latest with its login, whose sessions are ended before
-- it is dropped) and stops after 250 ms or n large objects (a login making
-- them by the thousand holds up no tick: the rest go on the next). One row for each thing found: its owner, what it was, and whether
-- it is gone (false: orca's role may not act as its owner, said in the
-- event).

CREATE FUNCTION orca.login_objects_sweep(p_at_most integer)
RETURNS TABLE (owner text, what text, removed boolean)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET lock_timeout = '20ms' AS $$
DECLARE
    began timestamptz := clock_timestamp();
    r record;
    kind text;
    theirs oid[];
    grantees text;
    grant_back text;
BEGIN
    SELECT array_agg(x.oid) INTO theirs FROM (
        SELECT g.oid FROM pg_roles g WHERE g.rolname IN ('orca_worker', 'orca_instance')
        UNION
        SELECT m.member FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid
        WHERE g.rolname IN ('orca_worker', 'orca_instance')
    ) x;
    IF theirs IS NULL THEN
        RETURN;
    END IF;
    FOR r IN SELECT l.oid, l.lomowner FROM pg_largeobject_metadata l
             WHERE l.lomowner = ANY (theirs) ORDER BY l.oid LIMIT p_at_most LOOP
        EXIT WHEN clock_timestamp() > began + interval '250 ms';
        owner := r.lomowner::regrole::text;
        what := format('large object %s', r.oid);
        BEGIN
            PERFORM lo_unlink(r.oid);
            removed := true;
        EXCEPTION WHEN undefined_object OR lock_not_available THEN
            CONTINUE; -- unlinked meanwhile, or locked: the next sweep
        WHEN OTHERS THEN
            removed := false; -- orca's role may not act as its owner
        END;
        RETURN NEXT;
    END LOOP;
    FOR r IN SELECT d.defaclrole, d.defaclnamespace, d.defaclobjtype, d.defaclacl
             FROM pg_default_acl d WHERE d.defaclrole = ANY (theirs)
             ORDER BY d.oid LOOP
        EXIT WHEN clock_timestamp() > began + interval '250 ms';
        kind := CASE r.defaclobjtype WHEN 'r' THEN 'TABLES' WHEN 'S' THEN 'SEQUENCES'
                     WHEN 'f' THEN 'FUNCTIONS' WHEN 'T' THEN 'TYPES' WHEN 'n' THEN 'SCHEMAS'
                     WHEN 'L' THEN 'LARGE OBJECTS' END;
        owner := r.defaclrole::regrole::text;
        what := format('default privileges on %s%s', lower(coalesce(kind, r.defaclobjtype::text)),
                       CASE WHEN r.defaclnamespace = 0 THEN ''
                            ELSE format(' in schema %s', r.defaclnamespace::regnamespace) END);
        -- Every grant revoked (from whoever the entry or the default names,
        -- and its role, so the list is never empty), then, for an entry of
        -- the whole database, Postgres's default granted back: an entry
        -- equal to the default, or a schema's entry left empty, is deleted.
        SELECT string_agg(DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                                        ELSE a.grantee::regrole::text END, ', ')
        INTO grantees
        FROM (SELECT (aclexplode(r.defaclacl)).grantee
              UNION ALL SELECT (aclexplode(acldefault(r.defaclobjtype, r.defaclrole))).grantee
              UNION ALL SELECT r.defaclrole) a;
        SELECT string_agg(format('ALTER DEFAULT PRIVILEGES FOR ROLE %s GRANT %s ON %s TO %s',
                                 r.defaclrole::regrole, a.privilege_type, kind,
                                 CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END),
                          '; ')
        INTO grant_back
        FROM aclexplode(acldefault(r.defaclobjtype, r.defaclrole)) a
        WHERE r.defaclnamespace = 0;
        BEGIN
            IF kind IS NULL THEN
                RAISE insufficient_privilege; -- a kind this function doesn't know
            END IF;
            EXECUTE format('ALTER DEFAULT PRIVILEGES FOR ROLE %s%s REVOKE ALL ON %s FROM %s',
                           r.defaclrole::regrole,
                           CASE WHEN r.defaclnamespace = 0 THEN ''
                                ELSE format(' IN SCHEMA %s', r.defaclnamespace::regnamespace) END,
                           kind, grantees);
            IF grant_back IS NOT NULL THEN
                EXECUTE grant_back;
            END IF;
            removed := true;
        EXCEPTION WHEN lock_not_available THEN
            CONTINUE; -- the next sweep
        WHEN OTHERS THEN
            removed := false; -- orca's role may not act as its role, or a kind it can't reset
        END;
        RETURN NEXT;
    END LOOP;
END
$$;
REVOKE ALL ON FUNCTION orca.login_objects_sweep(integer) FROM PUBLIC;
