//! orca's integration tests: the real binary, real processes, a real
//! Postgres (see `harness`). One test crate, so the suite links once.

mod arm64;
mod attempts;
mod chaos_found;
mod cli;
mod cost;
mod demo;
mod docs;
mod ec2;
mod ec2_runs;
mod ended;
mod engine;
mod fake_aws;
mod fake_imds;
mod flood;
mod functions;
mod graviton;
mod hardening;
// Some harness items are the bench's alone (bench/main.rs includes it too).
#[allow(dead_code)]
mod harness;
mod history;
mod interrupt;
mod launch;
mod layers;
mod logins;
mod map;
mod metrics;
mod on_lost;
mod ops;
mod orca_member;
mod outage;
mod overlap;
mod plans;
mod pools;
mod registry;
mod run_uids;
mod scheduler;
mod secrets;
mod setup;
mod spot;
mod upkeep;
mod wake;
mod wake_pool;
mod warm_pool;
mod worker;
