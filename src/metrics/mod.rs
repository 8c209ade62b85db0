//! Metrics in Prometheus's text exposition format (version 0.0.4), served
//! at `/metrics` when `ORCA_METRICS_ADDR` is set ([`serve`]).
//!
//! One registry a process: counters and gauges with labels, and a
//! histogram, in a mutex-protected map. The code that does a thing counts
//! it with a one-line call ([`add`], [`set`], [`observe`]); the HTTP thread
//! only renders what is stored ([`render`], a pure function of a
//! [`Snapshot`]), so a scrape never reaches the database.
//!
//! Invariants:
//! * Every family is one of the [`Def`]s below, with its HELP and TYPE; a
//!   series' label values come from orca.toml's pipeline and pool names,
//!   escaped when rendered ([`escape_label`]).
//! * A family holds at most [`MAX_SERIES`] series: a value past it is
//!   dropped (said once in the log), so no label can grow a process's
//!   memory without bound; [`retain`] drops retired pipelines' and pools'.
//!
//! This part imports nothing of orca's: the scheduler, pools, the
//! supervisor and the database connection call into it.

pub mod serve;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;

/// What kind of metric a family is (its `# TYPE`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    /// Only goes up (reset when the process starts).
    Counter,
    /// Set to what it is now.
    Gauge,
    /// Observations counted into [`BUCKETS`], with their sum and count.
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A metric family: its name, help, kind and label names.
#[derive(Debug)]
pub struct Def {
    /// Its name (`orca_…`, with its unit).
    pub name: &'static str,
    /// Its `# HELP` text.
    pub help: &'static str,
    /// Its `# TYPE`.
    pub kind: Kind,
    /// Its label names, in the order values are given.
    pub labels: &'static [&'static str],
}

/// `orca_leader`: 1 while this scheduler leads, else 0.
pub const LEADER: Def = Def {
    name: "orca_leader",
    help: "1 while this process holds the lead, 0 otherwise (workers: always 0).",
    kind: Kind::Gauge,
    labels: &[],
};
/// `orca_runs`: live runs by pipeline and state (read by the leader).
pub const RUNS: Def = Def {
    name: "orca_runs",
    help: "Runs queued or running, by pipeline and state, as the leader last read them.",
    kind: Kind::Gauge,
    labels: &["pipeline", "state"],
};
/// `orca_queue_oldest_seconds`: the age of the oldest run due to start.
pub const QUEUE_OLDEST: Def = Def {
    name: "orca_queue_oldest_seconds",
    help: "Seconds the oldest queued run of an unpaused pipeline has been due to start (database clock; 0: none).",
    kind: Kind::Gauge,
    labels: &[],
};
/// `orca_runs_started_total`: attempts this process started.
pub const STARTED: Def = Def {
    name: "orca_runs_started_total",
    help: "Attempts this process started (a retry's attempt counts again), by pipeline.",
    kind: Kind::Counter,
    labels: &["pipeline"],
};
/// `orca_runs_ended_total`: attempts' ends this process wrote.
pub const ENDED: Def = Def {
    name: "orca_runs_ended_total",
    help: "Attempts' ends this process recorded, by pipeline and outcome (succeeded, failed, timed_out, cancelled).",
    kind: Kind::Counter,
    labels: &["pipeline", "outcome"],
};
/// `orca_runs_retried_total`: failed attempts whose run was queued again.
pub const RETRIED: Def = Def {
    name: "orca_runs_retried_total",
    help: "Failed attempts whose run was queued again for a retry, by pipeline.",
    kind: Kind::Counter,
    labels: &["pipeline"],
};
/// `orca_tick_duration_seconds`: how long the scheduler's ticks take.
pub const TICK: Def = Def {
    name: "orca_tick_duration_seconds",
    help: "How long the scheduler's ticks took.",
    kind: Kind::Histogram,
    labels: &[],
};
/// `orca_pool_machines`: a pool's live machines by state.
pub const MACHINES: Def = Def {
    name: "orca_pool_machines",
    help: "Live machines by pool and state (booting, up, ending), as the leader last read them.",
    kind: Kind::Gauge,
    labels: &["pool", "state"],
};
/// `orca_pool_make_attempts_total`: calls to a provider to make a machine.
pub const MAKE_ATTEMPTS: Def = Def {
    name: "orca_pool_make_attempts_total",
    help: "Calls to a pool's provider to make a machine (one a location tried), by pool.",
    kind: Kind::Counter,
    labels: &["pool"],
};
/// `orca_pool_make_failures_total`: those that made none.
pub const MAKE_FAILURES: Def = Def {
    name: "orca_pool_make_failures_total",
    help: "Calls to make a machine that made none (no capacity or refused), by pool.",
    kind: Kind::Counter,
    labels: &["pool"],
};
/// `orca_db_errors_total`: database round trips that failed.
pub const DB_ERRORS: Def = Def {
    name: "orca_db_errors_total",
    help: "Database round trips that failed, by kind (connect, connection, statement, client).",
    kind: Kind::Counter,
    labels: &["kind"],
};

/// Every family, in the order they are rendered.
pub const ALL: [&Def; 11] = [
    &LEADER,
    &RUNS,
    &QUEUE_OLDEST,
    &STARTED,
    &ENDED,
    &RETRIED,
    &TICK,
    &MACHINES,
    &MAKE_ATTEMPTS,
    &MAKE_FAILURES,
    &DB_ERRORS,
];

/// The histogram's upper bounds (s): 1 ms to 10 s (`+Inf` is added).
pub const BUCKETS: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The most series a family holds (a value past it is dropped).
pub const MAX_SERIES: usize = 2000;

/// A histogram's figures: a count a bucket (not cumulative), sum, count.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram {
    /// Observations in each of [`BUCKETS`] (at most its bound, above the
    /// one before); those above the last are only in `count`.
    pub buckets: [u64; BUCKETS.len()],
    /// The sum of the observations.
    pub sum: f64,
    /// How many observations.
    pub count: u64,
}

impl Histogram {
    /// Counts `v` in.
    pub fn observe(&mut self, v: f64) {
        if let Some(i) = BUCKETS.iter().position(|b| v <= *b) {
            self.buckets[i] += 1;
        }
        self.sum += v;
        self.count += 1;
    }
}

/// A series' value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A counter's or a gauge's number.
    Number(f64),
    /// A histogram's figures.
    Histogram(Histogram),
}

/// The series of one family: label values to value.
pub type Series = BTreeMap<Vec<String>, Value>;

/// What the registry holds, by family name.
pub type Snapshot = BTreeMap<&'static str, Series>;

/// The process's registry.
static REGISTRY: Mutex<Snapshot> = Mutex::new(BTreeMap::new());

/// Whether the log has been told a family is full.
static SAID_FULL: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Runs `f` on `def`'s series (a poisoned lock is taken over: the map is
/// always whole between statements).
fn with<T>(def: &Def, f: impl FnOnce(&mut Series) -> T) -> T {
    let mut all = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    f(all.entry(def.name).or_default())
}

/// The series of `labels` in `series`, made if there is room.
fn entry<'a>(
    def: &Def,
    series: &'a mut Series,
    labels: &[&str],
    zero: impl FnOnce() -> Value,
) -> Option<&'a mut Value> {
    debug_assert_eq!(labels.len(), def.labels.len(), "{}", def.name);
    let key: Vec<String> = labels.iter().map(|s| s.to_string()).collect();
    if !series.contains_key(&key) && series.len() >= MAX_SERIES {
        if !SAID_FULL.swap(true, std::sync::atomic::Ordering::Relaxed) {
            log::warn!(
                "metrics: {} holds {MAX_SERIES} series: new label values are not counted",
                def.name
            );
        }
        return None;
    }
    Some(series.entry(key).or_insert_with(zero))
}

/// Adds `by` to counter `def`'s series of `labels` (values in the order
/// of its label names).
pub fn add(def: &Def, labels: &[&str], by: f64) {
    with(def, |series| {
        if let Some(Value::Number(n)) = entry(def, series, labels, || Value::Number(0.0)) {
            *n += by;
        }
    })
}

/// Sets gauge `def`'s series of `labels` to `v`.
pub fn set(def: &Def, labels: &[&str], v: f64) {
    with(def, |series| {
        if let Some(slot) = entry(def, series, labels, || Value::Number(0.0)) {
            *slot = Value::Number(v);
        }
    })
}

/// Replaces every series of gauge `def` with `all` (label values, value):
/// what the database said now, so a series it no longer names goes.
pub fn replace(def: &Def, all: Vec<(Vec<String>, f64)>) {
    with(def, |series| {
        series.clear();
        for (labels, v) in all.into_iter().take(MAX_SERIES) {
            series.insert(labels, Value::Number(v));
        }
    })
}

/// Counts `v` into histogram `def` (no labels).
pub fn observe(def: &Def, v: f64) {
    with(def, |series| {
        if let Some(Value::Histogram(h)) =
            entry(def, series, &[], || Value::Histogram(Histogram::default()))
        {
            h.observe(v);
        }
    })
}

/// Keeps only the series of `def` whose first label value `keep` allows
/// (the pipelines or pools registered now): a retired one's series go.
pub fn retain(def: &Def, keep: impl Fn(&str) -> bool) {
    with(def, |series| {
        series.retain(|labels, _| labels.first().is_none_or(|l| keep(l)))
    })
}

/// Whether this process serves its metrics ([`serve::start_from_env`]
/// found an address): what only a scrape needs (a statement to read the
/// gauges) is done only then.
pub fn on() -> bool {
    ON.load(std::sync::atomic::Ordering::Relaxed)
}

/// Set once the listener is up.
static ON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The outcome label of an attempt that ended in `state` (`succeeded`,
/// `failed`, `cancelled`), `timed_out` when it ran past its timeout.
pub fn outcome(state: &'static str, timed_out: bool) -> &'static str {
    if timed_out { "timed_out" } else { state }
}

/// Counts an attempt's end written for `pipeline`: its `state`, whether it
/// timed out, and the state its run is in now (`None`: the attempt was no
/// longer running, so nothing was written or counted; `queued` after a
/// failure: a retry).
pub fn ended(pipeline: &str, state: &'static str, timed_out: bool, now: Option<&str>) {
    let Some((outcome, retried)) = counted(state, timed_out, now) else {
        return;
    };
    add(&ENDED, &[pipeline, outcome], 1.0);
    if retried {
        add(&RETRIED, &[pipeline], 1.0);
    }
}

/// What an attempt's end counts as (see [`ended`]): its outcome label and
/// whether it is a retry; `None` when nothing was written.
pub fn counted(
    state: &'static str,
    timed_out: bool,
    now: Option<&str>,
) -> Option<(&'static str, bool)> {
    let now = now?;
    Some((
        outcome(state, timed_out),
        state == "failed" && now == "queued",
    ))
}

/// Counts a call to `pool`'s provider to make a machine, and whether it
/// made none (both at once: a scrape never sees a failure without its
/// attempt).
pub fn make_attempt(pool: &str, made: bool) {
    let mut all = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    let mut count = |def: &Def| {
        let series = all.entry(def.name).or_default();
        if let Some(Value::Number(n)) = entry(def, series, &[pool], || Value::Number(0.0)) {
            *n += 1.0;
        }
    };
    count(&MAKE_ATTEMPTS);
    if !made {
        count(&MAKE_FAILURES);
    }
}

/// A copy of what the registry holds now.
pub fn snapshot() -> Snapshot {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// The text exposition (format 0.0.4) of `snap`: every family of `defs`
/// with its `# HELP` and `# TYPE` lines, then its series in label order.
pub fn render(defs: &[&Def], snap: &Snapshot) -> String {
    let mut out = String::new();
    let empty = Series::new();
    for def in defs {
        let _ = writeln!(out, "# HELP {} {}", def.name, escape_help(def.help));
        let _ = writeln!(out, "# TYPE {} {}", def.name, def.kind.as_str());
        let series = snap.get(def.name).unwrap_or(&empty);
        // A gauge or histogram with no labels is always there (0 until set).
        if series.is_empty() && def.labels.is_empty() && def.kind != Kind::Counter {
            let zero = match def.kind {
                Kind::Histogram => Value::Histogram(Histogram::default()),
                _ => Value::Number(0.0),
            };
            sample(&mut out, def, &[], &zero);
        }
        for (labels, value) in series {
            sample(&mut out, def, labels, value);
        }
    }
    out
}

/// The lines of one series.
fn sample(out: &mut String, def: &Def, values: &[String], value: &Value) {
    let pairs: Vec<(&str, String)> = def
        .labels
        .iter()
        .zip(values)
        .map(|(k, v)| (*k, v.clone()))
        .collect();
    match value {
        Value::Number(n) => {
            let _ = writeln!(out, "{}{} {}", def.name, label_set(&pairs), number(*n));
        }
        Value::Histogram(h) => {
            let mut cumulative = 0;
            for (bound, n) in BUCKETS.iter().zip(h.buckets) {
                cumulative += n;
                let mut with_le = pairs.clone();
                with_le.push(("le", number(*bound)));
                let _ = writeln!(
                    out,
                    "{}_bucket{} {cumulative}",
                    def.name,
                    label_set(&with_le)
                );
            }
            let mut inf = pairs.clone();
            inf.push(("le", "+Inf".into()));
            let _ = writeln!(out, "{}_bucket{} {}", def.name, label_set(&inf), h.count);
            let _ = writeln!(
                out,
                "{}_sum{} {}",
                def.name,
                label_set(&pairs),
                number(h.sum)
            );
            let _ = writeln!(out, "{}_count{} {}", def.name, label_set(&pairs), h.count);
        }
    }
}

/// `{a="x",b="y"}`, or nothing for no labels.
fn label_set(pairs: &[(&str, String)]) -> String {
    if pairs.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// A number as the format writes it: `NaN`, `+Inf`, `-Inf`, or Rust's
/// shortest form that reads back the same (never an exponent).
pub fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}

/// A label value escaped as the format asks: backslash, double quote and
/// line feed as `\\`, `\"` and `\n`.
pub fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// HELP text escaped as the format asks: backslash and line feed.
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(name: &'static str, series: Vec<(Vec<&str>, Value)>) -> Snapshot {
        let mut s = Snapshot::new();
        s.insert(
            name,
            series
                .into_iter()
                .map(|(l, v)| (l.into_iter().map(String::from).collect(), v))
                .collect(),
        );
        s
    }

    #[test]
    fn a_counter_renders_help_type_and_each_series_in_label_order() {
        let s = snap(
            STARTED.name,
            vec![
                (vec!["nightly"], Value::Number(3.0)),
                (vec!["backup"], Value::Number(1.0)),
            ],
        );
        assert_eq!(
            render(&[&STARTED], &s),
            "# HELP orca_runs_started_total Attempts this process started (a retry's attempt counts again), by pipeline.\n\
             # TYPE orca_runs_started_total counter\n\
             orca_runs_started_total{pipeline=\"backup\"} 1\n\
             orca_runs_started_total{pipeline=\"nightly\"} 3\n"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
        let s = snap(
            ENDED.name,
            vec![(vec!["we\"ird\\\n", "failed"], Value::Number(2.0))],
        );
        let text = render(&[&ENDED], &s);
        assert!(
            text.ends_with(
                "orca_runs_ended_total{pipeline=\"we\\\"ird\\\\\\n\",outcome=\"failed\"} 2\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_histogram_renders_cumulative_buckets_sum_and_count() {
        let mut h = Histogram::default();
        for v in [0.0005, 0.003, 0.003, 20.0] {
            h.observe(v);
        }
        let s = snap(TICK.name, vec![(vec![], Value::Histogram(h))]);
        let text = render(&[&TICK], &s);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "# HELP orca_tick_duration_seconds How long the scheduler's ticks took."
        );
        assert_eq!(lines[1], "# TYPE orca_tick_duration_seconds histogram");
        assert_eq!(
            lines[2],
            "orca_tick_duration_seconds_bucket{le=\"0.001\"} 1"
        );
        assert_eq!(
            lines[3],
            "orca_tick_duration_seconds_bucket{le=\"0.0025\"} 1"
        );
        assert_eq!(
            lines[4],
            "orca_tick_duration_seconds_bucket{le=\"0.005\"} 3"
        );
        assert_eq!(lines[11], "orca_tick_duration_seconds_bucket{le=\"1\"} 3");
        assert_eq!(lines[14], "orca_tick_duration_seconds_bucket{le=\"10\"} 3");
        assert_eq!(
            lines[15],
            "orca_tick_duration_seconds_bucket{le=\"+Inf\"} 4"
        );
        assert_eq!(lines[16], "orca_tick_duration_seconds_sum 20.0065");
        assert_eq!(lines[17], "orca_tick_duration_seconds_count 4");
        assert_eq!(lines.len(), 18);
    }

    #[test]
    fn unlabelled_gauges_and_histograms_show_zero_before_any_value() {
        let text = render(&[&LEADER, &TICK, &DB_ERRORS], &Snapshot::new());
        assert!(text.contains("\norca_leader 0\n"), "{text}");
        assert!(
            text.contains("\norca_tick_duration_seconds_count 0\n"),
            "{text}"
        );
        // A labelled counter with nothing counted has no series yet.
        assert!(
            text.ends_with("# TYPE orca_db_errors_total counter\n"),
            "{text}"
        );
    }

    #[test]
    fn an_end_counts_its_outcome_and_a_failure_queued_again_is_a_retry() {
        assert_eq!(
            counted("succeeded", false, Some("succeeded")),
            Some(("succeeded", false))
        );
        assert_eq!(
            counted("failed", false, Some("failed")),
            Some(("failed", false))
        );
        assert_eq!(
            counted("failed", false, Some("queued")),
            Some(("failed", true))
        );
        assert_eq!(
            counted("failed", true, Some("queued")),
            Some(("timed_out", true))
        );
        assert_eq!(
            counted("failed", true, Some("failed")),
            Some(("timed_out", false))
        );
        assert_eq!(
            counted("cancelled", false, Some("cancelled")),
            Some(("cancelled", false))
        );
        assert_eq!(
            counted("failed", false, None),
            None,
            "not written: not counted"
        );
    }

    #[test]
    fn numbers_are_written_as_the_format_reads_them() {
        assert_eq!(number(1.0), "1");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(1e-7), "0.0000001");
        assert_eq!(number(f64::NAN), "NaN");
        assert_eq!(number(f64::INFINITY), "+Inf");
        assert_eq!(number(f64::NEG_INFINITY), "-Inf");
    }

    #[test]
    fn every_family_is_named_orca_and_a_counter_ends_in_total() {
        for def in ALL {
            assert!(def.name.starts_with("orca_"), "{}", def.name);
            assert_eq!(
                def.kind == Kind::Counter,
                def.name.ends_with("_total"),
                "{}",
                def.name
            );
            assert!(!def.labels.contains(&"le"), "{}", def.name);
        }
    }

    #[test]
    fn a_family_holds_at_most_max_series_and_retain_drops_the_retired() {
        // A family of the tests' own, so the other tests' are left alone.
        const T: Def = Def {
            name: "orca_test_total",
            help: "t",
            kind: Kind::Counter,
            labels: &["pipeline"],
        };
        for i in 0..MAX_SERIES + 10 {
            add(&T, &[&format!("p{i}")], 1.0);
        }
        add(&T, &["p0"], 1.0);
        let s = snapshot();
        assert_eq!(s[T.name].len(), MAX_SERIES);
        assert_eq!(s[T.name][&vec!["p0".to_string()]], Value::Number(2.0));
        retain(&T, |p| p == "p1");
        assert_eq!(snapshot()[T.name].len(), 1);
        replace(&T, vec![(vec!["x".into()], 5.0)]);
        assert_eq!(
            render(&[&T], &snapshot()),
            "# HELP orca_test_total t\n# TYPE orca_test_total counter\norca_test_total{pipeline=\"x\"} 5\n"
        );
    }
}
