//! `orca.toml`: the pipelines and pools an operator declares, checked with
//! every problem reported as `file:LINE: message`, and registered.
//!
//! The parts: [`spec`] (the stored spec types: a pipeline and a pool as
//! `orca register` writes them, a format other binary versions and plpgsql
//! read), [`check`] (the `file:LINE` checker and its bounds), [`cron`] (a
//! schedule checked field by field, parsed, and whether it ever fires),
//! [`register`] (a file's pipelines and pools written to the database, for
//! `orca register` and `orca scheduler -c`), [`pools`] (pools as the
//! database keeps them), [`arch`] (which AMI of an `ami` setting a type is
//! launched from, or why it is skipped: pure). This file: where the file is; [`Config`], a
//! whole checked file, is the checker's. Nothing here imports a command or
//! the scheduler: they call into it.

pub mod arch;
pub mod check;
pub mod cron;
pub mod pools;
pub mod register;
pub mod spec;

pub use check::{Config, load};
pub use spec::{Command, MachineSettings, Market, Pipeline, Placement, Pool, PoolType, Provider};

/// Where `orca.toml` is, when `-c` does not say: `ORCA_CONFIG`, else `./orca.toml`.
pub fn default_path() -> String {
    std::env::var("ORCA_CONFIG").unwrap_or_else(|_| "orca.toml".into())
}
