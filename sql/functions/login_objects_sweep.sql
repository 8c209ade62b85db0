-- orca.login_objects_sweep(integer), made by migration 21.
CREATE OR REPLACE FUNCTION orca.login_objects_sweep(p_at_most integer)
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
        WHERE g.rolname IN ('orca_worker', 'orca_instance') AND NOT m.admin_option
          AND m.member <> (SELECT oid FROM pg_roles WHERE rolname = current_user)
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
