-- Where `orca events -f` begins, read in the same snapshot as its listing:
-- the newest event's id (0: none yet), the settled id (the highest whose
-- event is over 10 seconds old by the database's clock, as in
-- events_follow.sql; 0 if none), and the ids past the settled one that
-- this snapshot sees. An event past the settled id that it doesn't see
-- (its transaction not yet committed, under a lower id than the newest)
-- is printed by the follow loop once it commits; the seen ones are not
-- printed again.
WITH n AS (
    SELECT coalesce(max(id), 0) AS id,
           coalesce((SELECT max(id) FROM orca.events
                     WHERE at < now() - interval '10 seconds'), 0) AS settled
    FROM orca.events
)
SELECT n.id, least(n.settled, n.id) AS settled,
       ARRAY(SELECT e.id FROM orca.events e
             WHERE e.id > least(n.settled, n.id) AND e.id <= n.id) AS seen
FROM n
