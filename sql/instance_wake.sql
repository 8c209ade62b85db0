-- `pool-next`'s wake channel: instance $1's own (orca.instance_wake,
-- migration 27); NULL when it has no live row of this login's.
SELECT orca.instance_wake($1) AS channel
