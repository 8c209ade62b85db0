-- Hardening against what machine and instance logins send and do
-- (docs/security.md): what they may store is bounded, locks only orca's own
-- functions take are row locks on orca's tables (which those logins can't
-- reach) instead of advisory keys anyone can take, their roles get
-- connection limits and timeouts, and orca's role can drop them without
-- being a superuser.

-- The longest `why` an attempt's end or requeue stores, in characters.
-- (Output is cut to its last 64 KiB, as orca.worker_output always did.)
-- orca.bounded_why(text) made here: its body is in sql/functions/bounded_why.sql.

-- orca.bounded_output(bytea) made here: its body is in sql/functions/bounded_output.sql.

-- How an attempt ended (as before: see migration 0003), with what it stores
-- bounded whoever calls it: `why` to 4096 characters, output to its last
-- 64 KiB, and the alert's body built here from the run's own facts, the
-- caller giving only the output's last 4 KiB (a machine can't write the
-- webhook's other fields).
-- orca.finish_attempt(bigint,integer,text,integer,integer,text,bytea,jsonb) changed here: its body is in sql/functions/finish_attempt.sql.

-- Puts attempt (id, start) back in the queue (as before), `why` and output
-- bounded as above.
-- orca.requeue_attempt(bigint,integer,text,bytea) changed here: its body is in sql/functions/requeue_attempt.sql.

-- A beat names at most this many attempts (a machine runs `slots` at once;
-- an instance heads one): more is refused, not unnested.
-- orca.check_beat(bigint[],integer[],integer[]) made here: its body is in sql/functions/check_beat.sql.

-- orca.worker_beat(bigint[],integer[],integer[]) changed here: its body is in sql/functions/worker_beat.sql.

-- orca.instance_head_beat(bigint[],integer[],integer[]) changed here: its body is in sql/functions/instance_head_beat.sql.

-- Claims serialise per pipeline on a row of this table (one per pipeline,
-- kept by a trigger), locked FOR UPDATE SKIP LOCKED inside
-- orca.worker_claim: only that function can take it, unlike the advisory
-- key 1869767526 it replaces, which any login could hold.
CREATE TABLE orca.claim_locks (
    pipeline text PRIMARY KEY
);
INSERT INTO orca.claim_locks SELECT name FROM orca.pipelines ON CONFLICT DO NOTHING;

-- orca.claim_lock_add() made here: its body is in sql/functions/claim_lock_add.sql.
-- A stand-in until that file replaces it as `orca migrate` ends: the
-- trigger below needs its function.
CREATE FUNCTION orca.claim_lock_add() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
CREATE TRIGGER pipelines_claim_lock AFTER INSERT ON orca.pipelines
FOR EACH ROW EXECUTE FUNCTION orca.claim_lock_add();

-- orca.worker_claim(integer) changed here: its body is in sql/functions/worker_claim.sql.

-- A machine's or instance's login role: at most 4 sessions (a worker needs
-- 2), and timeouts a careless client gets by default. A hostile one can SET
-- them back; the scheduler ends its sessions that stay in a transaction
-- (sql/logins_stuck_end.sql), and its own statements wait on no lock for
-- more than 2 s.
-- orca.login_role_make(text,text,text) made here: its body is in sql/functions/login_role_make.sql.

-- orca.machine_role_make(text,text) changed here: its body is in sql/functions/machine_role_make.sql.

-- orca.instance_role_make(text,text) changed here: its body is in sql/functions/instance_role_make.sql.

-- Drops a revoked login role with whatever it owns (a large object it
-- made, say). DROP OWNED needs the role's privileges, which a CREATEROLE
-- role that is not a superuser gets by granting the role to itself first.
-- False if it can't be dropped now (a session still ending): tried again
-- on a later pass.
-- orca.machine_role_drop(text) changed here: its body is in sql/functions/machine_role_drop.sql.

-- Logins made before this migration: orca's role a member of each too, and
-- the same limits and timeouts as new ones.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT m.rolname FROM pg_roles m
             JOIN pg_auth_members a ON a.member = m.oid
             JOIN pg_roles g ON g.oid = a.roleid
             WHERE g.rolname IN ('orca_worker', 'orca_instance') AND m.rolcanlogin
               AND NOT pg_has_role(current_user, m.oid, 'USAGE')
    LOOP
        BEGIN
            EXECUTE format('GRANT %I TO %I', r.rolname, current_user);
            EXECUTE format('ALTER ROLE %I CONNECTION LIMIT 4', r.rolname);
            EXECUTE format('ALTER ROLE %I SET statement_timeout = %L', r.rolname, '10s');
            EXECUTE format('ALTER ROLE %I SET lock_timeout = %L', r.rolname, '5s');
            EXECUTE format('ALTER ROLE %I SET idle_in_transaction_session_timeout = %L', r.rolname, '5s');
        EXCEPTION WHEN insufficient_privilege THEN
            NULL; -- another stack's login, not ours to manage
        WHEN undefined_object THEN
            NULL; -- dropped since it was listed (another stack removed its machine)
        WHEN unique_violation THEN
            NULL; -- granted meanwhile by another database's migration, at once
        END;
    END LOOP;
END
$$;

-- A machine's or instance's first login replaces the secret it booted with
-- (which sits in user-data, readable by any process on the machine): the
-- login sets its own role's password to SCRAM verifier p_verifier. Only for
-- the machine and instance logins orca makes; never a plain password.
-- orca.login_rotate(text) made here: its body is in sql/functions/login_rotate.sql.

REVOKE ALL ON TABLE orca.claim_locks FROM PUBLIC;
