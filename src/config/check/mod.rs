//! The `file:LINE` checker: an `orca.toml` read with toml's span-keeping
//! parser rather than straight into structs, so that one pass reports every
//! problem (not just the first) with the line it is on, as
//! `file:LINE: message`; what passes becomes a [`Config`] of stored specs
//! ([`crate::config::spec`]).
//!
//! Invariants:
//! * Whatever the file holds, checking it costs at most linear time in its
//!   size: a file over [`MAX_FILE_BYTES`] is refused unread (at most one
//!   byte more is read), a problem's line is found in a table of line
//!   starts, and at most [`MAX_PROBLEMS_SHOWN`] problems are printed.
//! * What it declares is bounded (the `MAX_*` constants): numbers that
//!   would make the scheduler fork or loop without end, and strings
//!   Postgres can't store (a NUL) or no command line takes, are refused.
//! * A problem's message is one line: its control characters are escaped.
//!
//! The files, each importing only those below it: this one ([`parse`],
//! [`load`]), [`pipeline`], [`pool`] and [`machines`] (the checks of each
//! kind of table), [`checker`] (the problems found, a value's checks, the
//! bounds), [`text`] (the file read within its bound, a problem's line,
//! the lines said).

mod checker;
mod machines;
mod pipeline;
mod pool;
#[cfg(test)]
mod tests;
mod text;

use std::collections::HashSet;

use toml::de::{DeTable, DeValue};

use crate::config::spec::{Pipeline, Pool};
use checker::Checker;
use text::{MAX_FILE_BYTES, MAX_PROBLEMS_SHOWN, line_starts, read_limited, shown};

pub use text::Problem;

/// A whole `orca.toml`.
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// Its pipelines, by name.
    pub pipelines: Vec<Pipeline>,
    /// Its worker pools, by name.
    pub pools: Vec<Pool>,
}

/// file can't be read or is over [`MAX_FILE_BYTES`], else its problems as
/// `path:LINE: message` (see [`shown`]).
pub fn load(path: &str) -> Result<Config, Vec<String>> {
    let text = read_limited(path, MAX_FILE_BYTES).map_err(|e| vec![e])?;
    parse(&text).map_err(|problems| shown(path, &problems, MAX_PROBLEMS_SHOWN))
}

/// Parses and validates the text of an `orca.toml`.
pub fn parse(text: &str) -> Result<Config, Vec<Problem>> {
    let mut c = Checker {
        starts: line_starts(text),
        problems: Vec::new(),
        worker_refs: Vec::new(),
    };
    let root = match DeTable::parse(text) {
        Ok(t) => t,
        Err(e) => {
            let line = e.span().map_or(1, |s| c.line(s.start));
            let message = e.message().trim().replace('\n', " ");
            return Err(vec![Problem { line, message }]);
        }
    };
    let mut config = Config::default();
    for (k, v) in root.get_ref().iter() {
        match k.get_ref().as_ref() {
            "pipelines" => match v.get_ref() {
                DeValue::Table(t) => {
                    for (name, pv) in t.iter() {
                        if let Some(p) = c.pipeline(name, pv) {
                            config.pipelines.push(p);
                        }
                    }
                }
                _ => c.say(v, "pipelines must be a table of [pipelines.NAME]"),
            },
            "pools" => match v.get_ref() {
                DeValue::Table(t) => {
                    for (name, pv) in t.iter() {
                        if let Some(p) = c.pool(name, pv) {
                            config.pools.push(p);
                        }
                    }
                }
                _ => c.say(v, "pools must be a table of [pools.NAME]"),
            },
            other => c.say(k, format!("unknown key '{other}'")),
        }
    }
    let declared: HashSet<&str> = match root.get_ref().get("pools").map(|v| v.get_ref()) {
        Some(DeValue::Table(t)) => t.keys().map(|k| k.get_ref().as_ref()).collect(),
        _ => HashSet::new(),
    };
    for (pool, line) in std::mem::take(&mut c.worker_refs) {
        if !declared.contains(&pool.as_str()) {
            c.problems.push(Problem {
                line,
                message: format!("placement worker:{pool}: there is no [pools.{pool}]"),
            });
        }
    }
    if c.problems.is_empty() {
        Ok(config)
    } else {
        c.problems.sort_by_key(|p| p.line);
        Err(c.problems)
    }
}
