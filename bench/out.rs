//! What the bench prints: `== heading ==` lines and `name: value` lines on
//! stdout (a goal or budget is named in the name of the figure it applies
//! to), progress on stderr; and the figures' formats.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A line of progress on stderr, `bench: ...`.
macro_rules! progress {
    ($($arg:tt)*) => {
        eprintln!("bench: {}", format_args!($($arg)*))
    };
}

static HEADED: AtomicBool = AtomicBool::new(false);

/// `== title ==`, after a blank line unless it is the first.
pub fn heading(title: &str) {
    if HEADED.swap(true, Ordering::SeqCst) {
        println!();
    }
    println!("== {title} ==");
}

/// `name: value`.
pub fn fig(name: &str, value: impl Display) {
    println!("{name}: {value}");
}

/// A value, or `n/a`.
pub fn or_na<T: Display>(v: Option<T>) -> String {
    v.map_or_else(|| "n/a".to_string(), |v| v.to_string())
}

/// A number with two decimals, or `n/a`.
pub fn f2(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_string(), |v| format!("{v:.2}"))
}

/// Bytes as MiB, two decimals.
pub fn mib(bytes: u64) -> String {
    format!("{:.2}", bytes as f64 / 1_048_576.0)
}

/// Seconds since `t0`, two decimals.
pub fn since(t0: Instant) -> String {
    secs(t0.elapsed())
}

/// Seconds, two decimals.
pub fn secs(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64())
}

/// A count as the figures name it: `10k`, `1M`, else as it is.
pub fn count_label(n: i64) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

/// The `key=value` line a scheduler writes to `ORCA_TICK_STATS` at exit.
#[derive(Default)]
pub struct Stats(BTreeMap<String, String>);

impl Stats {
    /// The file's figures; none when it is missing (the scheduler did not
    /// exit cleanly).
    pub fn read(path: &Path) -> Stats {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        Stats(
            text.split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    /// Whether the file had figures.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Figure `key` as written, or `n/a`.
    pub fn get(&self, key: &str) -> String {
        or_na(self.0.get(key))
    }

    /// Figure `key` as a number.
    pub fn num(&self, key: &str) -> Option<f64> {
        self.0.get(key).and_then(|v| v.parse().ok())
    }
}

/// The `q` quantile of sorted `v` as the shell bench picked it: the
/// `ceil(n * q)`-th smallest (1-based; at least the first).
pub fn quantile(v: &[f64], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let k = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len());
    Some(v[k - 1])
}

/// `label, median (goal): m`, `label, max (goal): x` and `label, each: ...`
/// of repeated figures (three decimals); failed repetitions (None) are
/// left out of median and max, which then say how many were measured.
pub fn repeated(label: &str, goal: &str, values: &[Option<f64>]) {
    let goal = if goal.is_empty() {
        String::new()
    } else {
        format!(" ({goal})")
    };
    let mut ok: Vec<f64> = values.iter().flatten().copied().collect();
    ok.sort_by(f64::total_cmp);
    let k = ok.len();
    let (mut med, mut max) = match k {
        0 => ("n/a".to_string(), "n/a".to_string()),
        _ if k % 2 == 1 => (format!("{:.3}", ok[k / 2]), format!("{:.3}", ok[k - 1])),
        _ => (
            format!("{:.3}", (ok[k / 2 - 1] + ok[k / 2]) / 2.0),
            format!("{:.3}", ok[k - 1]),
        ),
    };
    if k < values.len() {
        let of = format!(" ({k} of {} measured)", values.len());
        med += &of;
        max += &of;
    }
    let each: Vec<String> = values
        .iter()
        .map(|v| v.map_or_else(|| "n/a".to_string(), |v| format!("{v:.3}")))
        .collect();
    fig(&format!("{label}, median{goal}"), med);
    fig(&format!("{label}, max{goal}"), max);
    fig(&format!("{label}, each"), each.join(" "));
}

/// Words joined by spaces (exit codes and the like).
pub fn words<T: Display>(v: &[T]) -> String {
    v.iter().map(T::to_string).collect::<Vec<_>>().join(" ")
}
