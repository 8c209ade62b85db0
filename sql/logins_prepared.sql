-- Transactions prepared (PREPARE TRANSACTION) in this database over $1
-- seconds ago by any role but orca's own: orca prepares none, and one left
-- prepared keeps its locks (a claim's, a run's, the lead's) with no session
-- to end, across restarts. A machine login may prepare as itself or as its
-- group (SET ROLE orca_worker). Each with its owner and gid quoted by the
-- server, for `SET ROLE owner; ROLLBACK PREPARED gid` (orca's role is a
-- member of every login it makes, and so of their groups); `can` is false
-- where it isn't (a dropped owner, another role's).
SELECT p.gid, coalesce(p.owner::text, '?') AS owner, quote_ident(p.owner) AS role,
       quote_literal(p.gid) AS literal,
       p.owner IS NOT NULL AND pg_has_role(current_user, p.owner, 'MEMBER') AS can
FROM pg_prepared_xacts p
WHERE p.database = current_database() AND p.prepared <= now() - make_interval(secs => $1)
  AND p.owner IS DISTINCT FROM current_user
