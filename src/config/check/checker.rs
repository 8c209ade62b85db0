//! The checker ([`Checker`]): the problems found so far, and the checks of
//! one value (a string, a list, a number, seconds, a command, a named
//! table) that every part of a file shares, with the bounds on what a file
//! declares (the `MAX_*` constants). A pipeline's, an EC2 run's, a pool's
//! and their machine settings' checks are in the files beside it.

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::text::{Problem, line_of, size};
use crate::config::spec::{Command, valid_name};

/// The longest `command`, `sensor` or service (a string, or an array's
/// strings together), in bytes.
pub const MAX_COMMAND_BYTES: usize = 64 * 1024;
/// The longest value of an `env` variable, in bytes.
pub const MAX_ENV_VALUE_BYTES: usize = 64 * 1024;
/// Variables in one `env` table at most.
pub const MAX_ENV_VARS: usize = 256;
/// The longest of every other string (an `env` name, a schedule, an alert
/// URL, a type, a location, an AMI, an image...), in bytes.
pub const MAX_SHORT_BYTES: usize = 1024;
/// Items in `locations`, `types` and `security_groups` at most.
pub const MAX_LIST_ITEMS: usize = 64;
/// The largest `max_runs`.
pub const MAX_RUNS: i64 = 10_000;
/// The largest `retries`.
pub const MAX_RETRIES: i64 = 1000;
/// The largest `[pipelines.NAME.ec2] workers` (instances beside the head).
pub const MAX_WORKERS: i64 = 256;
/// The largest `max_machines` of a pool.
pub const MAX_MACHINES: i64 = 1000;
/// The largest `slots` of a pool.
pub const MAX_SLOTS: i64 = 256;
/// The largest `capacity` of a location.
pub const MAX_CAPACITY: i64 = 10_000;

/// Where machine settings were met while checking (for their checks).
#[derive(Default)]
pub(super) struct Seen {
    pub(super) ec2_lines: Vec<usize>,
    /// An `ami` was given (if malformed, said where; not also missing).
    pub(super) ami: bool,
    pub(super) capacity_at: Option<usize>,
}

/// A file being checked: where its lines start, the problems found.
pub(super) struct Checker {
    /// Where each line starts, to find a problem's line in log time.
    pub(super) starts: Vec<usize>,
    pub(super) problems: Vec<Problem>,
    /// `worker:<pool>` placements seen, with their line, to check the pools exist.
    pub(super) worker_refs: Vec<(String, usize)>,
}

impl Checker {
    pub(super) fn line(&self, offset: usize) -> usize {
        line_of(&self.starts, offset)
    }

    pub(super) fn say<T>(&mut self, at: &Spanned<T>, message: impl Into<String>) {
        let line = self.line(at.span().start);
        self.problems.push(Problem {
            line,
            message: message.into(),
        });
    }

    /// Whether `s` (the value of `key`, at `at`) may be stored: no NUL
    /// (Postgres refuses it in text and jsonb) and at most `max` bytes.
    pub(super) fn storable<T>(&mut self, key: &str, at: &Spanned<T>, s: &str, max: usize) -> bool {
        if s.contains('\0') {
            self.say(at, format!("{key} contains a NUL byte"));
            false
        } else if s.len() > max {
            self.say(at, format!("{key} is longer than {}", size(max)));
            false
        } else {
            true
        }
    }

    /// A string of at most [`MAX_SHORT_BYTES`].
    pub(super) fn string(&mut self, key: &str, v: &Spanned<DeValue>) -> Option<String> {
        self.string_max(key, v, MAX_SHORT_BYTES)
    }

    /// A string of at most `max` bytes, with no NUL.
    pub(super) fn string_max(
        &mut self,
        key: &str,
        v: &Spanned<DeValue>,
        max: usize,
    ) -> Option<String> {
        match v.get_ref() {
            DeValue::String(s) => self.storable(key, v, s, max).then(|| s.to_string()),
            _ => {
                self.say(v, format!("{key} must be a string"));
                None
            }
        }
    }

    /// The strings of `key`, an array of at most [`MAX_LIST_ITEMS`]
    /// (`non_empty`: at least one), each at most [`MAX_SHORT_BYTES`].
    pub(super) fn strings(
        &mut self,
        key: &str,
        v: &Spanned<DeValue>,
        non_empty: bool,
        what: &str,
    ) -> Vec<String> {
        let mut out = Vec::new();
        match v.get_ref() {
            DeValue::Array(a) if !(non_empty && a.is_empty()) => {
                if a.len() > MAX_LIST_ITEMS {
                    self.say(
                        v,
                        format!("{key}: at most {MAX_LIST_ITEMS} items (got {})", a.len()),
                    );
                    return out;
                }
                for item in a.iter() {
                    if let Some(s) = self.string(&format!("{key}: every item"), item) {
                        out.push(s);
                    }
                }
            }
            _ => self.say(
                v,
                format!(
                    "{key} must be a{} array of {what}",
                    if non_empty { " non-empty" } else { "n" }
                ),
            ),
        }
        out
    }

    pub(super) fn integer(
        &mut self,
        key: &str,
        v: &Spanned<DeValue>,
        min: i64,
        max: i64,
    ) -> Option<i64> {
        let n = match v.get_ref() {
            DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix()).ok(),
            _ => None,
        };
        match n {
            None => {
                self.say(v, format!("{key} must be a whole number"));
                None
            }
            Some(n) if n < 0 => {
                self.say(v, format!("{key} must not be negative (got {n})"));
                None
            }
            Some(n) if n < min => {
                self.say(v, format!("{key} must be at least {min} (got {n})"));
                None
            }
            Some(n) if n > max => {
                self.say(v, format!("{key} must be at most {max} (got {n})"));
                None
            }
            Some(n) => Some(n),
        }
    }

    pub(super) fn seconds(
        &mut self,
        key: &str,
        v: &Spanned<DeValue>,
        zero_ok: bool,
    ) -> Option<f64> {
        let n = match v.get_ref() {
            DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix())
                .ok()
                .map(|n| n as f64),
            DeValue::Float(f) => f.as_str().replace('_', "").parse::<f64>().ok(),
            _ => None,
        };
        match n {
            Some(n) if n.is_finite() && n < 0.0 => {
                self.say(v, format!("{key} must not be negative (got {n})"));
                None
            }
            Some(n) if n.is_finite() && (zero_ok || n > 0.0) && n < 1e9 => Some(n),
            Some(n) if n.is_finite() && n == 0.0 => {
                self.say(v, format!("{key} must be more than 0 seconds"));
                None
            }
            _ => {
                self.say(v, format!("{key} must be a number of seconds"));
                None
            }
        }
    }

    /// A command: a string, or an array of strings, of at most
    /// [`MAX_COMMAND_BYTES`] in all, with no NUL.
    pub(super) fn command(&mut self, key: &str, v: &Spanned<DeValue>) -> Option<Command> {
        match v.get_ref() {
            DeValue::String(s) if !s.trim().is_empty() => self
                .storable(key, v, s, MAX_COMMAND_BYTES)
                .then(|| Command::Shell(s.to_string())),
            DeValue::Array(a) => {
                let mut argv = Vec::new();
                for item in a.iter() {
                    match item.get_ref() {
                        DeValue::String(s) => {
                            if !self.storable(key, item, s, MAX_COMMAND_BYTES) {
                                return None;
                            }
                            argv.push(s.to_string())
                        }
                        _ => {
                            self.say(item, format!("{key}: every item must be a string"));
                            return None;
                        }
                    }
                }
                if argv.is_empty() || argv[0].is_empty() {
                    self.say(v, format!("{key} must not be empty"));
                    return None;
                }
                let all: usize = argv.iter().map(|a| a.len() + 1).sum();
                if all > MAX_COMMAND_BYTES {
                    self.say(
                        v,
                        format!("{key} is longer than {}", size(MAX_COMMAND_BYTES)),
                    );
                    return None;
                }
                Some(Command::Argv(argv))
            }
            _ => {
                self.say(
                    v,
                    format!("{key} must be a non-empty string or an array of strings"),
                );
                None
            }
        }
    }

    /// The table of `[pipelines.NAME]` or `[pools.NAME]` (`kind`), checking
    /// its name.
    pub(super) fn named_table<'v, 'i>(
        &mut self,
        kind: &str,
        name: &Spanned<std::borrow::Cow<str>>,
        v: &'v Spanned<DeValue<'i>>,
    ) -> Option<&'v DeTable<'i>> {
        if name.get_ref().contains('\0') {
            self.say(name, format!("{kind} name contains a NUL byte"));
        } else if !valid_name(name.get_ref()) {
            self.say(
                name,
                format!(
                    "{kind} name '{}' may hold only letters, digits, '_', '-' and '.'",
                    name.get_ref()
                ),
            );
        }
        match v.get_ref() {
            DeValue::Table(table) => Some(table),
            _ => {
                self.say(v, format!("{kind}s.{} must be a table", name.get_ref()));
                None
            }
        }
    }
}
