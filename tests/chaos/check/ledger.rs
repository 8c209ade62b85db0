//! The ledger the workload's commands write, read back: each line a begin
//! or an end of an attempt, with its pid and time; a line it can't read is
//! kept to be reported.

/// The ledger's clock step (`/proc/uptime` has two decimals): a time it
/// says is up to this much before the instant it stands for.
pub const LEDGER_TICK: f64 = 0.01;

/// A `begin` line.
#[derive(Clone, Debug)]
pub struct Begin {
    /// The run.
    pub run: i64,
    /// The attempt.
    pub start: i32,
    /// The command's pid.
    pub pid: i32,
    /// When (uptime).
    pub t: f64,
    /// Its supervisor (the keeper's parent: a scheduler, worker or
    /// `ec2-serve`) and that one's process group.
    pub sup: i32,
    /// The supervisor's group.
    pub supg: i32,
    /// The pipeline.
    pub pipeline: String,
}

/// An `end` line.
#[derive(Clone, Debug)]
pub struct End {
    /// The run.
    pub run: i64,
    /// The attempt.
    pub start: i32,
    /// The command's pid.
    pub pid: i32,
    /// When.
    pub t: f64,
    /// Its exit code, or None for `term` (stopped by SIGTERM, exit 143).
    pub code: Option<i32>,
}

/// Parses the ledger; lines that don't parse are returned as problems.
pub fn parse_ledger(text: &str) -> (Vec<Begin>, Vec<End>, Vec<String>) {
    let (mut b, mut e, mut bad) = (Vec::new(), Vec::new(), Vec::new());
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let parsed = match w.first() {
            Some(&"begin") if w.len() == 8 => (|| {
                b.push(Begin {
                    run: w[1].parse().ok()?,
                    start: w[2].parse().ok()?,
                    pid: w[3].parse().ok()?,
                    t: w[4].parse().ok()?,
                    sup: w[5].parse().ok()?,
                    supg: w[6].parse().ok()?,
                    pipeline: w[7].to_string(),
                });
                Some(())
            })(),
            Some(&"end") if w.len() == 6 => (|| {
                e.push(End {
                    run: w[1].parse().ok()?,
                    start: w[2].parse().ok()?,
                    pid: w[3].parse().ok()?,
                    t: w[4].parse().ok()?,
                    code: if w[5] == "term" {
                        None
                    } else {
                        Some(w[5].parse().ok()?)
                    },
                });
                Some(())
            })(),
            _ => None,
        };
        if parsed.is_none() {
            bad.push(format!("ledger: a line that doesn't parse: {line:?}"));
        }
    }
    (b, e, bad)
}
