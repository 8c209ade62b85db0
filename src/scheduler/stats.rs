//! The tick stats file: with `ORCA_TICK_STATS` naming a file, the scheduler
//! keeps each tick's and each pool scaler pass's cost (milliseconds and
//! statements) and writes their summary there as it stops, one
//! `key=value` line that `make bench` reads. Its keys are a format:
//! `bench/out.rs` (`Stats`) parses them.
//!
//! With `ORCA_TICK_STATS_WINDOW` set too (seconds), it keeps only a
//! window's ticks: each window's line overwrites the file as the window
//! ends (and the last, partial one at exit), so a soak (`make bench`'s
//! history section) reads the figures as they go, in bounded memory.
//!
//! Invariant: without `ORCA_TICK_STATS` nothing is kept.

use std::time::{Duration, Instant};

/// What a tick or a scaler pass cost: milliseconds and statements.
pub type Figure = (f64, u64);

/// The figures kept for `ORCA_TICK_STATS`.
pub struct TickStats {
    /// The file written at exit.
    path: String,
    /// Each tick's.
    ticks: Vec<Figure>,
    /// Each scaler pass's.
    passes: Vec<Figure>,
    /// `ORCA_TICK_STATS_WINDOW`: the window's length and when it began.
    window: Option<(Duration, Instant)>,
}

impl TickStats {
    /// Kept when `ORCA_TICK_STATS` names a file.
    pub fn from_env() -> Option<TickStats> {
        let window = std::env::var("ORCA_TICK_STATS_WINDOW")
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|w| w.is_finite() && *w > 0.0 && *w < 1e6)
            .map(|w| (Duration::from_secs_f64(w), Instant::now()));
        std::env::var("ORCA_TICK_STATS").ok().map(|path| TickStats {
            window,
            ..TickStats::new(path)
        })
    }

    /// None kept yet, to be written to `path`.
    pub fn new(path: String) -> TickStats {
        TickStats {
            path,
            ticks: Vec::new(),
            passes: Vec::new(),
            window: None,
        }
    }

    /// A tick's figure (with a window, its line written as it ends).
    pub fn tick(&mut self, figure: Figure) {
        self.ticks.push(figure);
        if let Some((length, began)) = self.window
            && began.elapsed() >= length
        {
            self.write();
            self.ticks.clear();
            self.passes.clear();
            self.window = Some((length, Instant::now()));
        }
    }

    /// A scaler pass's figure.
    pub fn pass(&mut self, figure: Figure) {
        self.passes.push(figure);
    }

    /// The summary line: counts, percentiles and maxima of the
    /// milliseconds, mean statements.
    pub fn line(&self) -> String {
        let (n, p50, p99, max, per) = summary(&self.ticks);
        let (sn, s50, _, smax, sper) = summary(&self.passes);
        format!(
            "ticks={n} p50_ms={p50:.2} p99_ms={p99:.2} max_ms={max:.2} statements_per_tick={per:.2} \
             scaler_passes={sn} scaler_p50_ms={s50:.2} scaler_max_ms={smax:.2} scaler_statements_per_pass={sper:.2}\n"
        )
    }

    /// Writes [`TickStats::line`] to its file (a failure is logged).
    pub fn write(&self) {
        if let Err(e) = std::fs::write(&self.path, self.line()) {
            log::error!("ORCA_TICK_STATS {}: {e}", self.path);
        }
    }
}

/// count, p50, p99, max of the first figure; mean of the second.
fn summary(figures: &[Figure]) -> (usize, f64, f64, f64, f64) {
    let mut ms: Vec<f64> = figures.iter().map(|t| t.0).collect();
    ms.sort_by(|a, b| a.total_cmp(b));
    let pick = |q: f64| {
        ms.get(((ms.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or(0.0)
    };
    let calls: u64 = figures.iter().map(|t| t.1).sum();
    (
        ms.len(),
        pick(0.5),
        pick(0.99),
        ms.last().copied().unwrap_or(0.0),
        calls as f64 / ms.len().max(1) as f64,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_is_nearest_rank_percentiles_and_the_mean_of_statements() {
        let figures: Vec<Figure> = (1..=100).rev().map(|n| (n as f64, 3)).collect();
        assert_eq!(summary(&figures), (100, 51.0, 99.0, 100.0, 3.0));
        assert_eq!(summary(&[(2.0, 1), (1.0, 4)]), (2, 2.0, 2.0, 2.0, 2.5));
    }

    #[test]
    fn nothing_kept_is_all_zeros() {
        assert_eq!(summary(&[]), (0, 0.0, 0.0, 0.0, 0.0));
        assert_eq!(
            TickStats::new("x".into()).line(),
            "ticks=0 p50_ms=0.00 p99_ms=0.00 max_ms=0.00 statements_per_tick=0.00 \
             scaler_passes=0 scaler_p50_ms=0.00 scaler_max_ms=0.00 scaler_statements_per_pass=0.00\n"
        );
    }

    #[test]
    fn ticks_and_passes_are_summed_up_apart() {
        let mut s = TickStats::new("x".into());
        s.tick((1.5, 4));
        s.tick((2.5, 6));
        s.pass((10.0, 7));
        assert_eq!(
            s.line(),
            "ticks=2 p50_ms=2.50 p99_ms=2.50 max_ms=2.50 statements_per_tick=5.00 \
             scaler_passes=1 scaler_p50_ms=10.00 scaler_max_ms=10.00 scaler_statements_per_pass=7.00\n"
        );
    }

    #[test]
    fn a_window_writes_its_own_line_as_it_ends_and_keeps_no_more() {
        let path = std::env::temp_dir().join(format!("orca-stats-{}", std::process::id()));
        let mut s = TickStats {
            window: Some((Duration::ZERO, Instant::now())),
            ..TickStats::new(path.to_string_lossy().into_owned())
        };
        s.tick((7.0, 2));
        let line = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(line.starts_with("ticks=1 p50_ms=7.00 "), "{line}");
        assert!(s.ticks.is_empty(), "the window's ticks are let go");
    }
}
