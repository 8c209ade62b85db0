-- Transactions that machine and instance logins prepared (PREPARE
-- TRANSACTION) in this database over $1 seconds ago: they keep their locks
-- with no session to end. Each with its owner and gid quoted by the server,
-- for `SET ROLE owner; ROLLBACK PREPARED gid` (orca's role is a member of
-- every login it makes). Returns gid, owner, quoted owner, quoted gid.
SELECT p.gid, p.owner::text, quote_ident(p.owner), quote_literal(p.gid)
FROM pg_prepared_xacts p
JOIN pg_roles r ON r.rolname = p.owner
WHERE p.database = current_database() AND p.prepared < now() - make_interval(secs => $1)
  AND pg_has_role(current_user, r.oid, 'USAGE')
  AND EXISTS (SELECT 1 FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid
              WHERE m.member = r.oid AND g.rolname IN ('orca_worker', 'orca_instance'))
