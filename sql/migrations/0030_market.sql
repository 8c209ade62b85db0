-- Migration 30: how each machine is bought (issue 35, stage 1). A pool's
-- walk step, and an EC2 run's [ec2] table, may be spot: each pool machine
-- and each EC2 run's instance records the market it was launched in, so
-- `orca pools` shows it and a later stage can tell a spot machine's
-- interruption from a loss. Rows written before are on-demand (all there
-- was). Machine and instance logins have no grant on either table (they go
-- through orca's functions only), so none can change its market.
ALTER TABLE orca.pool_machines
    ADD COLUMN market text NOT NULL DEFAULT 'on-demand'
        CHECK (market IN ('on-demand', 'spot'));
ALTER TABLE orca.instances
    ADD COLUMN market text NOT NULL DEFAULT 'on-demand'
        CHECK (market IN ('on-demand', 'spot'));
