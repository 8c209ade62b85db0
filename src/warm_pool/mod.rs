//! Seed 000 (`orca.pool`): a run placed on `ec2` gets a head and workers of
//! its own, kept warm for the next run. Two sides, one table
//! (`orca.instances`):
//!
//! * `leader`: the leading scheduler's side: hands idle instances over,
//!   makes the rest (at most `ORCA_EC2_MAKE_PER_TICK` a tick), queues again
//!   the runs of lost heads, ends and deletes instances;
//! * `instance`: the instance's side, run by `scripts/instance.sh` with the
//!   instance's own login: `ec2-serve`, `pool-wait`, `pool-next`;
//! * `decide`: the leader's decisions as pure functions (what a run still
//!   needs and where each instance comes from, the make budget, a lost
//!   head, trimming, strays' turn), unit-tested;
//! * `order`: an instance as the fleet's one way of making a machine makes
//!   it (`machines::make`).
//!
//! Invariant: an instance's login acts only through the `orca.instance_*`
//! functions, on its own rows and the run it serves.

pub mod decide;
pub mod instance;
pub mod leader;
pub mod order;
