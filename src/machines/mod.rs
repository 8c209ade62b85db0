//! Machines, whatever they serve (a worker pool's machines, an EC2 run's
//! instances): each one's own database login (`logins`: a role per machine,
//! its secret sent as a SCRAM verifier, revoked and dropped with it), what it
//! boots with (`boot`: the boot script and its settings), the stack id
//! that labels every machine this stack makes (`stack`), and the providers
//! the pool scaler and EC2 runs make and delete them with, by kind and
//! region, one for both (`fleet`), the one way a machine is made
//! (`make`), and the decisions they share, pure: the location walk and
//! strays (`walk`); what logins made, removed (`objects`). Which AMI a
//! type is launched from, or why it is skipped, is `config::arch`.
//!
//! Invariant: a machine's secret exists in clear only in the scheduler's
//! memory and the machine's user-data; the database holds its verifier.

pub mod boot;
pub mod fleet;
pub mod logins;
pub mod make;
pub mod objects;
pub mod stack;
pub mod walk;
