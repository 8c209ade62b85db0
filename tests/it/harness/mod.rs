//! What the integration tests share, one file per concern: a database of
//! each test's own as orca's role (`db`), what processes cost it
//! (`cost`: sessions, transactions, WAL), real orca processes and what runs
//! leave (`proc`), Postgres clusters of a test's own (`cluster`), pool machines made by hand
//! (`machine`), a tiny OCI registry (`registry`), and waiting with a deadline, scratch
//! directories and text (`util`). Tests `use crate::harness::*`; the bench
//! (`bench/main.rs`) includes this module too.

mod cluster;
mod cost;
mod db;
mod machine;
mod proc;
mod registry;
mod util;

pub use cluster::*;
pub use cost::*;
pub use db::*;
pub use machine::*;
pub use proc::*;
pub use registry::*;
pub use util::*;
