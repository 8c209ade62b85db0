-- Migration 31: a spot notice on a pool machine's row (issue 35, stage 2a).
--
-- A machine's worker that hears from its instance metadata that EC2 will
-- interrupt it (spot/instance-action) or recommends it be rebalanced
-- records it through orca.worker_notice() (sql/functions/worker_notice.sql):
-- `notice` is 'interrupted' or 'draining', `noticed_at` when it was
-- recorded (the database's clock), `notice_at` EC2's time for it (an
-- interruption's termination time; a rebalance's noticeTime). From then on
-- it claims nothing more (orca.claim_runs), and the scaler no longer counts
-- its room (sql/pool_machines_live.sql): it asks for a replacement if the
-- demand needs one, and removes the machine once it runs nothing.
ALTER TABLE orca.pool_machines
    ADD COLUMN notice text,
    ADD COLUMN noticed_at timestamptz,
    ADD COLUMN notice_at timestamptz;
