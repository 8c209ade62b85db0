//! orca's integration tests: the real binary, real processes, a real
//! Postgres (see `harness`). One test crate, so the suite links once.

mod cli;
mod cost;
mod demo;
mod ec2;
mod ec2_runs;
mod engine;
mod fake_aws;
mod hardening;
mod harness;
mod layers;
mod outage;
mod overlap;
mod pools;
mod registry;
mod scheduler;
mod secrets;
mod setup;
mod warm_pool;
mod worker;
