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

use std::collections::{BTreeMap, HashSet};
use std::io::Read;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::config::Config;
use crate::config::cron::{fires_ever, parse_schedule};
use crate::config::spec::{
    Command, DEFAULT_MAX_FILLS, Ec2Spec, MachineSettings, OnLost, Pipeline, Placement, Pool,
    PoolType, Provider, valid_name,
};

/// The largest config file read (1 MiB); a larger one is refused.
pub const MAX_FILE_BYTES: u64 = 1 << 20;
/// Problems printed at most; the rest are counted in one more line.
pub const MAX_PROBLEMS_SHOWN: usize = 100;
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
struct Seen {
    ec2_lines: Vec<usize>,
    capacity_at: Option<usize>,
}

/// A problem found in the file, on a line.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// 1-based line.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// Reads and validates `path`; on failure, the lines to print: one if the
/// file can't be read or is over [`MAX_FILE_BYTES`], else its problems as
/// `path:LINE: message` (see [`shown`]).
pub fn load(path: &str) -> Result<Config, Vec<String>> {
    let text = read_limited(path, MAX_FILE_BYTES).map_err(|e| vec![e])?;
    parse(&text).map_err(|problems| shown(path, &problems, MAX_PROBLEMS_SHOWN))
}

/// The text of `path`, read up to `limit` bytes and one more: a file (or a
/// device, or a pipe) that has more is refused without reading the rest.
pub fn read_limited(path: &str, limit: u64) -> Result<String, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{path}: {e}"))?;
    if bytes.len() as u64 > limit {
        return Err(format!(
            "{path}: over {}, the most a config file may hold: refused",
            size(limit as usize)
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "{path}: not UTF-8 text (at byte {})",
            e.utf8_error().valid_up_to()
        )
    })
}

/// The lines that say `problems` of file `path`: the first `max` as
/// `path:LINE: message` (control characters escaped, so each stays one
/// line), then how many more there are, if any.
pub fn shown(path: &str, problems: &[Problem], max: usize) -> Vec<String> {
    let mut lines: Vec<String> = problems
        .iter()
        .take(max)
        .map(|p| format!("{path}:{}: {}", p.line, one_line(&p.message)))
        .collect();
    if problems.len() > max {
        lines.push(format!(
            "{path}: ... and {}",
            crate::plural::count((problems.len() - max) as i64, "more problem")
        ));
    }
    lines
}

/// `s` with its control characters (a NUL, a newline) escaped as `\u{0}`.
fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// `n` bytes for people: `64 KiB`, `1 MiB`.
fn size(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1024 && n.is_multiple_of(1024) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}

/// Where each line of `text` starts (the first at 0), for [`line_of`].
pub fn line_starts(text: &str) -> Vec<usize> {
    std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect()
}

/// The 1-based line of byte `offset`, given the text's [`line_starts`].
pub fn line_of(starts: &[usize], offset: usize) -> usize {
    starts.partition_point(|&s| s <= offset).max(1)
}

struct Checker {
    /// Where each line starts, to find a problem's line in log time.
    starts: Vec<usize>,
    problems: Vec<Problem>,
    /// `worker:<pool>` placements seen, with their line, to check the pools exist.
    worker_refs: Vec<(String, usize)>,
}

impl Checker {
    fn line(&self, offset: usize) -> usize {
        line_of(&self.starts, offset)
    }

    fn say<T>(&mut self, at: &Spanned<T>, message: impl Into<String>) {
        let line = self.line(at.span().start);
        self.problems.push(Problem {
            line,
            message: message.into(),
        });
    }

    /// Whether `s` (the value of `key`, at `at`) may be stored: no NUL
    /// (Postgres refuses it in text and jsonb) and at most `max` bytes.
    fn storable<T>(&mut self, key: &str, at: &Spanned<T>, s: &str, max: usize) -> bool {
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
    fn string(&mut self, key: &str, v: &Spanned<DeValue>) -> Option<String> {
        self.string_max(key, v, MAX_SHORT_BYTES)
    }

    /// A string of at most `max` bytes, with no NUL.
    fn string_max(&mut self, key: &str, v: &Spanned<DeValue>, max: usize) -> Option<String> {
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
    fn strings(
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

    fn integer(&mut self, key: &str, v: &Spanned<DeValue>, min: i64, max: i64) -> Option<i64> {
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

    fn seconds(&mut self, key: &str, v: &Spanned<DeValue>, zero_ok: bool) -> Option<f64> {
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
    fn command(&mut self, key: &str, v: &Spanned<DeValue>) -> Option<Command> {
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
    fn named_table<'v, 'i>(
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

    fn pipeline(
        &mut self,
        name: &Spanned<std::borrow::Cow<str>>,
        v: &Spanned<DeValue>,
    ) -> Option<Pipeline> {
        let table = self.named_table("pipeline", name, v)?;
        let before = self.problems.len();
        let mut p = Pipeline {
            name: name.get_ref().to_string(),
            command: Command::Argv(vec![]),
            placement: Placement::Local,
            max_runs: 1,
            max_fills: DEFAULT_MAX_FILLS,
            schedule: None,
            retries: 0,
            retry_delay: 60.0,
            timeout: None,
            env: BTreeMap::new(),
            alert: None,
            sensor: None,
            sensor_every: 60.0,
            ec2: None,
            on_lost: OnLost::Retry,
        };
        let mut command = None;
        let mut ec2_at = None;
        for (k, v) in table.iter() {
            let key = k.get_ref().as_ref();
            match key {
                "command" => command = self.command(key, v),
                "placement" => {
                    if let Some(s) = self.string(key, v) {
                        match Placement::parse(&s) {
                            Some(pl) => {
                                if let Placement::Worker(pool) = &pl {
                                    let line = self.line(v.span().start);
                                    self.worker_refs.push((pool.clone(), line));
                                }
                                p.placement = pl
                            }
                            None => self.say(
                                v,
                                format!(
                                    "bad placement '{s}': want \"local\", \"worker:<pool>\" or \"ec2\""
                                ),
                            ),
                        }
                    }
                }
                "max_runs" => {
                    if let Some(n) = self.integer(key, v, 1, MAX_RUNS) {
                        p.max_runs = n as i32;
                    }
                }
                "max_fills" => {
                    if let Some(n) = self.integer(key, v, 1, MAX_RUNS) {
                        p.max_fills = n as i32;
                    }
                }
                "schedule" => {
                    if let Some(s) = self.string(key, v) {
                        match parse_schedule(&s) {
                            Ok(cron) if fires_ever(&cron) => p.schedule = Some(s),
                            Ok(_) => self.say(
                                v,
                                format!("schedule \"{s}\" never fires (no month has such a day)"),
                            ),
                            Err(e) => self.say(v, e),
                        }
                    }
                }
                "retries" => {
                    if let Some(n) = self.integer(key, v, 0, MAX_RETRIES) {
                        p.retries = n as i32;
                    }
                }
                "retry_delay" => {
                    if let Some(n) = self.seconds(key, v, true) {
                        p.retry_delay = n;
                    }
                }
                "timeout" => p.timeout = self.seconds(key, v, false),
                "env" => match v.get_ref() {
                    DeValue::Table(t) if t.len() > MAX_ENV_VARS => self.say(
                        v,
                        format!("env: at most {MAX_ENV_VARS} variables (got {})", t.len()),
                    ),
                    DeValue::Table(t) => {
                        for (ek, ev) in t.iter() {
                            let name = ek.get_ref().to_string();
                            if !self.storable("env: a variable name", ek, &name, MAX_SHORT_BYTES) {
                                continue;
                            }
                            if name.is_empty() || name.contains('=') {
                                self.say(ek, format!("env: bad variable name '{name}'"));
                                continue;
                            }
                            let key = format!("env.{name}");
                            if let Some(s) = self.string_max(&key, ev, MAX_ENV_VALUE_BYTES) {
                                p.env.insert(name, s);
                            }
                        }
                    }
                    _ => self.say(v, "env must be a table of strings"),
                },
                "alert" => {
                    if let Some(s) = self.string(key, v) {
                        if s.starts_with("http://") || s.starts_with("https://") {
                            p.alert = Some(s);
                        } else {
                            self.say(v, "alert must be an http:// or https:// URL");
                        }
                    }
                }
                "sensor" => p.sensor = self.command(key, v),
                "on_lost" => {
                    if let Some(s) = self.string(key, v) {
                        match OnLost::parse(&s) {
                            Some(o) => p.on_lost = o,
                            None => self
                                .say(v, format!("bad on_lost '{s}': want \"retry\" or \"fail\"")),
                        }
                    }
                }
                "ec2" => {
                    ec2_at = Some(self.line(v.span().start));
                    p.ec2 = self.ec2_spec(&p.name, v);
                }
                "sensor_every" => {
                    if let Some(n) = self.seconds(key, v, false) {
                        p.sensor_every = n;
                    }
                }
                other => self.say(k, format!("unknown key '{other}' in pipelines.{}", p.name)),
            }
        }
        match command {
            Some(c) => p.command = c,
            None if !table.contains_key("command") => {
                self.say(name, format!("pipelines.{}: missing command", p.name));
            }
            None => {}
        }
        match (&p.placement, ec2_at) {
            (Placement::Ec2, None) => self.say(
                name,
                format!(
                    "pipelines.{}: placement \"ec2\" needs a [pipelines.{}.ec2] table",
                    p.name, p.name
                ),
            ),
            (Placement::Ec2, Some(_)) | (_, None) => {}
            (_, Some(line)) => self.problems.push(Problem {
                line,
                message: format!("pipelines.{}.ec2 is for placement \"ec2\" only", p.name),
            }),
        }
        (self.problems.len() == before).then_some(p)
    }

    /// `[pipelines.NAME.ec2]`.
    fn ec2_spec(&mut self, pipeline: &str, v: &Spanned<DeValue>) -> Option<Ec2Spec> {
        let DeValue::Table(table) = v.get_ref() else {
            self.say(v, format!("pipelines.{pipeline}.ec2 must be a table"));
            return None;
        };
        let before = self.problems.len();
        let mut m = MachineSettings::default();
        let mut seen = Seen::default();
        let mut type_ = None;
        let mut e = Ec2Spec {
            machines: MachineSettings::default(),
            type_: String::new(),
            workers: 0,
            head_service: None,
            worker_service: None,
            update: None,
        };
        for (k, v) in table.iter() {
            let key = k.get_ref().as_ref();
            if self.machine_key(key, v, &mut m, &mut seen) {
                continue;
            }
            match key {
                "type" => type_ = self.string(key, v),
                "workers" => {
                    if let Some(n) = self.integer(key, v, 0, MAX_WORKERS) {
                        e.workers = n as i32;
                    }
                }
                "head_service" => e.head_service = self.command(key, v),
                "worker_service" => e.worker_service = self.command(key, v),
                "update" => e.update = self.command(key, v),
                other => self.say(
                    k,
                    format!("unknown key '{other}' in pipelines.{pipeline}.ec2"),
                ),
            }
        }
        let what = format!("pipelines.{pipeline}.ec2");
        match &type_ {
            Some(t) => e.type_ = t.clone(),
            None if !table.contains_key("type") => self.say(v, format!("{what}: missing type")),
            None => {}
        }
        if m.locations.is_empty() && !table.contains_key("locations") {
            self.say(v, format!("{what}: missing locations"));
        }
        self.machine_checks(v, &what, &m, type_.as_slice(), seen);
        e.machines = m;
        (self.problems.len() == before).then_some(e)
    }

    /// Reads `key` into `m` if it is one of the machine settings a pool and
    /// an EC2 run share; false if it isn't one.
    fn machine_key(
        &mut self,
        key: &str,
        v: &Spanned<DeValue>,
        m: &mut MachineSettings,
        seen: &mut Seen,
    ) -> bool {
        match key {
            "provider" => match self.string(key, v).as_deref() {
                Some("local") => m.provider = Provider::Local,
                Some("ec2") => m.provider = Provider::Ec2,
                Some(other) => self.say(
                    v,
                    format!("bad provider '{other}': want \"local\" or \"ec2\""),
                ),
                None => {}
            },
            "locations" => {
                m.locations = self.strings(key, v, true, "strings");
            }
            "ami" | "instance_profile" | "region" => {
                seen.ec2_lines.push(self.line(v.span().start));
                let value = self.string(key, v);
                match key {
                    "ami" => m.ami = value,
                    "instance_profile" => m.instance_profile = value,
                    _ => m.region = value,
                }
            }
            "security_groups" => {
                seen.ec2_lines.push(self.line(v.span().start));
                m.security_groups = self.strings(key, v, false, "security group ids");
            }
            "capacity" => match v.get_ref() {
                DeValue::Table(t) => {
                    seen.capacity_at = Some(self.line(v.span().start));
                    for (ck, cv) in t.iter() {
                        let loc = ck.get_ref().to_string();
                        if !self.storable("capacity: a location", ck, &loc, MAX_SHORT_BYTES) {
                            continue;
                        }
                        if let Some(n) =
                            self.integer(&format!("capacity.{loc}"), cv, 0, MAX_CAPACITY)
                        {
                            m.capacity.insert(loc, n as i32);
                        }
                    }
                }
                _ => self.say(v, "capacity must be a table of location = machines"),
            },
            _ => return false,
        }
        true
    }

    /// The checks the machine settings of `what` (at `at`) must pass:
    /// ec2 settings only with the ec2 provider, which needs an ami; capacity
    /// only with the local one, naming its locations and `types`.
    fn machine_checks(
        &mut self,
        at: &Spanned<impl Sized>,
        what: &str,
        m: &MachineSettings,
        types: &[String],
        seen: Seen,
    ) {
        if m.provider != Provider::Ec2 {
            for line in seen.ec2_lines {
                self.problems.push(Problem {
                    line,
                    message: "ami, instance_profile, security_groups and region are settings of the ec2 provider".into(),
                });
            }
        } else if m.ami.is_none() {
            self.say(at, format!("{what}: the ec2 provider needs an ami"));
        }
        if let Some(line) = seen.capacity_at {
            if m.provider != Provider::Local {
                self.problems.push(Problem {
                    line,
                    message: "capacity is a setting of the local provider".into(),
                });
            }
            for key in m.capacity.keys() {
                // LOCATION, or TYPE@LOCATION for one type there.
                let (ty, loc) = key
                    .split_once('@')
                    .map_or((None, key.as_str()), |(t, l)| (Some(t), l));
                if !m.locations.iter().any(|l| l == loc) {
                    self.problems.push(Problem {
                        line,
                        message: format!("capacity names '{loc}', which is not in locations"),
                    });
                }
                if let Some(ty) = ty
                    && !types.iter().any(|t| t == ty)
                {
                    self.problems.push(Problem {
                        line,
                        message: format!("capacity names type '{ty}', which is not in types"),
                    });
                }
            }
        }
    }

    fn pool(
        &mut self,
        name: &Spanned<std::borrow::Cow<str>>,
        v: &Spanned<DeValue>,
    ) -> Option<Pool> {
        let table = self.named_table("pool", name, v)?;
        let before = self.problems.len();
        let mut p = Pool {
            name: name.get_ref().to_string(),
            types: Vec::new(),
            max_machines: 1,
            idle_seconds: 300.0,
            slots: 1,
            image: None,
            machines: MachineSettings::default(),
        };
        let mut m = MachineSettings::default();
        let mut seen = Seen::default();
        for (k, v) in table.iter() {
            let key = k.get_ref().as_ref();
            if self.machine_key(key, v, &mut m, &mut seen) {
                continue;
            }
            match key {
                "types" => match v.get_ref() {
                    DeValue::Array(a) if a.len() > MAX_LIST_ITEMS => self.say(
                        v,
                        format!("types: at most {MAX_LIST_ITEMS} items (got {})", a.len()),
                    ),
                    DeValue::Array(a) if !a.is_empty() => {
                        for item in a.iter() {
                            if let Some(t) = self.pool_type(item) {
                                p.types.push(t);
                            }
                        }
                    }
                    _ => self.say(
                        v,
                        "types must be a non-empty array of { type = \"...\", wait = SECONDS }",
                    ),
                },
                "max_machines" => {
                    if let Some(n) = self.integer(key, v, 1, MAX_MACHINES) {
                        p.max_machines = n as i32;
                    }
                }
                "idle_seconds" => {
                    if let Some(n) = self.seconds(key, v, true) {
                        p.idle_seconds = n;
                    }
                }
                "slots" => {
                    if let Some(n) = self.integer(key, v, 1, MAX_SLOTS) {
                        p.slots = n as i32;
                    }
                }
                "image" => p.image = self.string(key, v),
                other => self.say(k, format!("unknown key '{other}' in pools.{}", p.name)),
            }
        }
        for (key, missing) in [
            ("types", p.types.is_empty()),
            ("locations", m.locations.is_empty()),
        ] {
            if missing && !table.contains_key(key) {
                self.say(name, format!("pools.{}: missing {key}", p.name));
            }
        }
        let types: Vec<String> = p.types.iter().map(|t| t.name.clone()).collect();
        self.machine_checks(name, &format!("pools.{}", p.name), &m, &types, seen);
        p.machines = m;
        (self.problems.len() == before).then_some(p)
    }

    fn pool_type(&mut self, item: &Spanned<DeValue>) -> Option<PoolType> {
        let DeValue::Table(t) = item.get_ref() else {
            self.say(
                item,
                "types: every item must be { type = \"...\", wait = SECONDS }",
            );
            return None;
        };
        let mut name = None;
        let mut wait = 0.0;
        for (k, v) in t.iter() {
            match k.get_ref().as_ref() {
                "type" => name = self.string("type", v).filter(|s| !s.is_empty()),
                "wait" => wait = self.seconds("wait", v, true)?,
                other => self.say(k, format!("unknown key '{other}' in a type")),
            }
        }
        if name.is_none() {
            self.say(item, "types: every item needs a type");
        }
        Some(PoolType { name: name?, wait })
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether a problem on `line` says `text`.
    fn has(problems: &[Problem], line: usize, text: &str) -> bool {
        problems
            .iter()
            .any(|p| p.line == line && p.message.contains(text))
    }

    #[test]
    fn a_good_file_parses() {
        let c = parse(
            r#"
[pipelines.hello]
command = "echo hi"
schedule = "*/5 * * * *"
max_runs = 2
retries = 3
retry_delay = 1.5
timeout = 30
env = { A = "b" }
alert = "http://127.0.0.1:9/hook"

[pipelines.argv]
command = ["/bin/echo", "x"]
placement = "worker:gpu"
sensor = "test -f /tmp/x"
sensor_every = 5

[pools.gpu]
types = [{ type = "t" }]
locations = ["here"]
"#,
        )
        .unwrap();
        assert_eq!(c.pipelines.len(), 2);
        let h = &c.pipelines.iter().find(|p| p.name == "hello").unwrap();
        assert_eq!(h.max_runs, 2);
        assert_eq!(h.retry_delay, 1.5);
        assert_eq!(h.env["A"], "b");
        let a = &c.pipelines.iter().find(|p| p.name == "argv").unwrap();
        assert_eq!(a.placement, Placement::Worker("gpu".into()));
        assert_eq!(a.command.argv(&["y".into()]), vec!["/bin/echo", "x", "y"]);
    }

    #[test]
    fn every_problem_has_its_line() {
        let text = "[pipelines.a]\ncommand = \"x\"\nbogus = 1\n\n[pipelines.b]\nschedule = \"61 * * * *\"\n\n[pipelines.c]\ncommand = \"x\"\nmax_runs = -1\nplacement = \"mars\"\n";
        let problems = parse(text).unwrap_err();
        assert!(has(&problems, 3, "unknown key 'bogus'"), "{problems:?}");
        assert!(
            has(
                &problems,
                6,
                "schedule \"61 * * * *\": minute field: 61 is out of range 0-59"
            ),
            "{problems:?}"
        );
        assert!(has(&problems, 5, "missing command"), "{problems:?}");
        assert!(has(&problems, 10, "negative"), "{problems:?}");
        assert!(has(&problems, 11, "bad placement"), "{problems:?}");
    }

    #[test]
    fn pools_parse_and_are_checked() {
        let c = parse(
            r#"
[pools.gpu]
provider = "local"
types = [{ type = "big", wait = 30 }, { type = "small" }]
locations = ["a", "b"]
max_machines = 3
idle_seconds = 60
slots = 2
capacity = { a = 1, b = 0 }

[pipelines.train]
command = "true"
placement = "worker:gpu"
"#,
        )
        .unwrap();
        let pool = &c.pools[0];
        assert_eq!(
            pool.types[0],
            PoolType {
                name: "big".into(),
                wait: 30.0
            }
        );
        assert_eq!(pool.types[1].wait, 0.0);
        assert_eq!(pool.machines.capacity["b"], 0);
        assert_eq!(pool.slots, 2);

        let text = "[pools.p]\nprovider = \"moon\"\ntypes = []\nmax_machines = 0\n\n[pipelines.x]\ncommand = \"true\"\nplacement = \"worker:nope\"\n";
        let problems = parse(text).unwrap_err();
        assert!(
            has(&problems, 1, "pools.p: missing locations"),
            "{problems:?}"
        );
        assert!(has(&problems, 2, "bad provider"), "{problems:?}");
        assert!(has(&problems, 3, "types must be"), "{problems:?}");
        assert!(has(&problems, 4, "at least 1"), "{problems:?}");
        assert!(has(&problems, 8, "no [pools.nope]"), "{problems:?}");
    }

    #[test]
    fn ec2_runs_parse_and_are_checked() {
        let c = parse(
            r#"
[pipelines.train]
command = "python train.py"
placement = "ec2"

[pipelines.train.ec2]
provider = "ec2"
type = "g6.xlarge"
locations = ["subnet-a", "subnet-b"]
ami = "ami-1"
security_groups = ["sg-1"]
workers = 2
head_service = "ray start --head --block"
worker_service = ["ray", "start", "--block"]
update = "git pull"
"#,
        )
        .unwrap();
        let e = c.pipelines[0].ec2.as_ref().unwrap();
        assert_eq!((e.type_.as_str(), e.workers), ("g6.xlarge", 2));
        assert_eq!(e.machines.locations, ["subnet-a", "subnet-b"]);
        assert_eq!(e.machines.ami.as_deref(), Some("ami-1"));
        assert!(e.head_service.is_some() && e.worker_service.is_some() && e.update.is_some());
        // Stored and read back as the scheduler reads it.
        let spec = serde_json::to_value(&c.pipelines[0]).unwrap();
        let back: Pipeline = serde_json::from_value(spec).unwrap();
        assert_eq!(&back, &c.pipelines[0]);

        let text = "[pipelines.a]\ncommand = \"true\"\nplacement = \"ec2\"\n\n\
                    [pipelines.b]\ncommand = \"true\"\n[pipelines.b.ec2]\ntype = \"t\"\nlocations = [\"x\"]\n\n\
                    [pipelines.c]\ncommand = \"true\"\nplacement = \"ec2\"\n[pipelines.c.ec2]\nprovider = \"ec2\"\nlocations = [\"x\"]\nworkers = -1\ncolour = 1\n";
        let problems = parse(text).unwrap_err();
        assert!(
            has(&problems, 1, "needs a [pipelines.a.ec2] table"),
            "{problems:?}"
        );
        assert!(
            has(&problems, 7, "is for placement \"ec2\" only"),
            "{problems:?}"
        );
        assert!(has(&problems, 14, "missing type"), "{problems:?}");
        assert!(has(&problems, 14, "needs an ami"), "{problems:?}");
        assert!(has(&problems, 17, "must not be negative"), "{problems:?}");
        assert!(has(&problems, 18, "unknown key 'colour'"), "{problems:?}");
    }

    #[test]
    fn lines_are_found_in_the_table_of_line_starts() {
        let text = "a\nbc\n\nd";
        let starts = line_starts(text);
        assert_eq!(starts, [0, 2, 5, 6]);
        let lines: Vec<usize> = (0..=text.len()).map(|o| line_of(&starts, o)).collect();
        assert_eq!(lines, [1, 1, 2, 2, 2, 3, 4, 4]);
        assert_eq!(line_of(&line_starts(""), 0), 1);
    }

    #[test]
    fn at_most_so_many_problems_are_shown_then_a_count() {
        let problems: Vec<Problem> = (1..=5)
            .map(|line| Problem {
                line,
                message: format!("bad\n{line}\0"),
            })
            .collect();
        let lines = shown("f.toml", &problems, 3);
        assert_eq!(
            lines,
            [
                "f.toml:1: bad\\u{a}1\\u{0}",
                "f.toml:2: bad\\u{a}2\\u{0}",
                "f.toml:3: bad\\u{a}3\\u{0}",
                "f.toml: ... and 2 more problems",
            ]
        );
        assert_eq!(shown("f.toml", &problems[..3], 3).len(), 3);
        let one_more = shown("f.toml", &problems[..4], 3);
        assert_eq!(one_more[3], "f.toml: ... and 1 more problem");
    }

    #[test]
    fn a_file_is_read_up_to_its_limit_and_one_byte_more() {
        let dir = std::env::temp_dir().join(format!("orca-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f.toml");
        let path = path.to_str().unwrap();
        std::fs::write(path, "x".repeat(10)).unwrap();
        assert_eq!(read_limited(path, 10).unwrap().len(), 10);
        let e = read_limited(path, 9).unwrap_err();
        assert!(e.starts_with(&format!("{path}: over 9 bytes")), "{e}");
        let e = read_limited("/dev/zero", 1 << 20).unwrap_err();
        assert!(e.contains("over 1 MiB"), "{e}");
        std::fs::write(path, b"a\xff").unwrap();
        assert!(read_limited(path, 10).unwrap_err().contains("not UTF-8"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_schedule_that_never_fires_is_refused() {
        for never in ["0 0 31 2 *", "0 0 30 2 *", "0 0 0 31 4 *", "0 0 30,31 2 *"] {
            let text = format!("[pipelines.a]\ncommand = \"true\"\nschedule = \"{never}\"\n");
            let problems = parse(&text).unwrap_err();
            assert!(has(&problems, 3, "never fires"), "{never}: {problems:?}");
        }
        // Feb 29 fires in leap years; a weekday listed beside a day fires on it.
        for fires in [
            "0 0 29 2 *",
            "0 0 31 2 1",
            "0 0 L 2 *",
            "0 12 31 * *",
            "@yearly",
        ] {
            let text = format!("[pipelines.a]\ncommand = \"true\"\nschedule = \"{fires}\"\n");
            assert!(parse(&text).is_ok(), "{fires}: {:?}", parse(&text));
        }
    }

    #[test]
    fn absurd_numbers_are_refused_naming_the_limit() {
        let text = "[pipelines.a]\ncommand = \"true\"\nplacement = \"ec2\"\nmax_runs = 100000\nretries = 100000\n\
                    [pipelines.a.ec2]\nprovider = \"local\"\ntype = \"t\"\nlocations = [\"x\"]\nworkers = 100000\n\
                    [pools.p]\ntypes = [{ type = \"t\" }]\nlocations = [\"x\"]\nmax_machines = 100000\nslots = 100000\n";
        let problems = parse(text).unwrap_err();
        assert!(
            has(&problems, 4, "max_runs must be at most 10000"),
            "{problems:?}"
        );
        assert!(
            has(&problems, 5, "retries must be at most 1000"),
            "{problems:?}"
        );
        assert!(
            has(&problems, 10, "workers must be at most 256"),
            "{problems:?}"
        );
        assert!(
            has(&problems, 14, "max_machines must be at most 1000"),
            "{problems:?}"
        );
        assert!(
            has(&problems, 15, "slots must be at most 256"),
            "{problems:?}"
        );
        for (value, said) in [
            ("0", "max_fills must be at least 1"),
            ("10001", "max_fills must be at most 10000"),
        ] {
            let text = format!("[pipelines.a]\ncommand = \"true\"\nmax_fills = {value}\n");
            let problems = parse(&text).unwrap_err();
            assert!(has(&problems, 3, said), "{problems:?}");
        }
        let a = &parse("[pipelines.a]\ncommand = \"true\"\nmax_fills = 3\n")
            .unwrap()
            .pipelines[0];
        assert_eq!(a.max_fills, 3);
        let a = &parse("[pipelines.a]\ncommand = \"true\"\n")
            .unwrap()
            .pipelines[0];
        assert_eq!(a.max_fills, DEFAULT_MAX_FILLS);
        let fine = "[pipelines.a]\ncommand = \"true\"\nplacement = \"ec2\"\n\
                    [pipelines.a.ec2]\nprovider = \"local\"\ntype = \"t\"\nlocations = [\"x\"]\nworkers = 256\n";
        assert!(parse(fine).is_ok(), "{:?}", parse(fine));
    }

    #[test]
    fn a_nul_in_any_stored_string_is_refused() {
        let cases = [
            "command = \"echo \\u0000\"",
            "command = [\"echo\", \"a\\u0000b\"]",
            "env = { A = \"x\\u0000\" }",
            "env = { \"A\\u0000\" = \"x\" }",
            "schedule = \"0 3 * * *\\u0000\"",
            "alert = \"http://x/\\u0000\"",
            "sensor = \"test\\u0000\"",
            "placement = \"worker:p\\u0000\"",
        ];
        for case in cases {
            let text = format!("[pipelines.a]\ncommand = \"true\"\n{case}\n");
            let text = text.replacen("command = \"true\"\ncommand", "command", 1);
            let problems = parse(&text).unwrap_err();
            assert!(
                problems.iter().any(|p| p.message.contains("NUL byte")),
                "{case}: {problems:?}"
            );
        }
        let pool = "[pools.p]\ntypes = [{ type = \"t\" }]\nlocations = [\"x\"]\n";
        for case in [
            pool.replace("[\"x\"]", "[\"x\\u0000\"]"),
            pool.replace("\"t\"", "\"t\\u0000\""),
            format!("{pool}image = \"i\\u0000\""),
            format!("{pool}capacity = {{ \"x\\u0000\" = 1 }}"),
        ] {
            let text = format!("{case}\n");
            let problems = parse(&text).unwrap_err();
            assert!(
                problems.iter().any(|p| p.message.contains("NUL byte")),
                "{case}: {problems:?}"
            );
        }
        for case in [
            "ami = \"a\\u0000\"",
            "region = \"r\\u0000\"",
            "security_groups = [\"s\\u0000\"]",
            "update = \"u\\u0000\"",
        ] {
            let text = format!(
                "[pipelines.a]\ncommand = \"true\"\nplacement = \"ec2\"\n[pipelines.a.ec2]\nprovider = \"ec2\"\ntype = \"t\"\nlocations = [\"x\"]\n{case}\n"
            );
            let text = if case.starts_with("ami") {
                text
            } else {
                text.replace(
                    "\n[pipelines.a.ec2]\n",
                    "\n[pipelines.a.ec2]\nami = \"ami\"\n",
                )
            };
            let problems = parse(&text).unwrap_err();
            assert!(
                problems.iter().any(|p| p.message.contains("NUL byte")),
                "{case}: {problems:?}"
            );
        }
    }

    #[test]
    fn strings_and_tables_are_bounded() {
        let long = "x".repeat(65 * 1024);
        let text = format!("[pipelines.a]\ncommand = \"{long}\"\n");
        let problems = parse(&text).unwrap_err();
        assert!(
            has(&problems, 2, "command is longer than 64 KiB"),
            "{problems:?}"
        );
        let text = format!("[pipelines.a]\ncommand = \"true\"\nenv = {{ A = \"{long}\" }}\n");
        let problems = parse(&text).unwrap_err();
        assert!(
            has(&problems, 3, "env.A is longer than 64 KiB"),
            "{problems:?}"
        );
        let many: Vec<String> = (0..300).map(|n| format!("V{n} = \"x\"")).collect();
        let text = format!(
            "[pipelines.a]\ncommand = \"true\"\nenv = {{ {} }}\n",
            many.join(", ")
        );
        let problems = parse(&text).unwrap_err();
        assert!(has(&problems, 3, "at most 256 variables"), "{problems:?}");
        let text = format!(
            "[pipelines.a]\ncommand = \"true\"\nalert = \"http://{}\"\n",
            "x".repeat(2000)
        );
        let problems = parse(&text).unwrap_err();
        assert!(
            has(&problems, 3, "alert is longer than 1 KiB"),
            "{problems:?}"
        );
        // A name is at most 64 characters.
        let text = format!("[pipelines.{}]\ncommand = \"true\"\n", "n".repeat(65));
        assert!(parse(&text).is_err());
        let text = format!("[pipelines.{}]\ncommand = \"true\"\n", "n".repeat(64));
        assert!(parse(&text).is_ok());
    }

    #[test]
    fn on_lost_is_retry_or_fail() {
        let text = "[pipelines.a]\ncommand = \"true\"\non_lost = \"fail\"\n\n[pipelines.b]\ncommand = \"true\"\n";
        let c = parse(text).unwrap();
        assert_eq!(c.pipelines[0].on_lost, OnLost::Fail);
        assert_eq!(c.pipelines[1].on_lost, OnLost::Retry);
        let problems =
            parse("[pipelines.a]\ncommand = \"true\"\non_lost = \"never\"\n").unwrap_err();
        assert!(has(&problems, 3, "bad on_lost 'never'"), "{problems:?}");
    }

    #[test]
    fn syntax_errors_have_a_line() {
        let problems = parse("[pipelines.a]\ncommand = \"x\"\nmax_runs = = 3\n").unwrap_err();
        assert_eq!(problems[0].line, 3, "{problems:?}");
    }
}
