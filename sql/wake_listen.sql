-- The leading scheduler listens on the channel runs' triggers notify
-- (orca.wake, migration 26). LISTEN takes no bind parameter: the name is
-- read and quoted by the server, never by the client.
DO $$ BEGIN EXECUTE format('LISTEN %I', (SELECT w.channel FROM orca.wake w)); END $$
