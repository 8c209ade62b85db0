//! A run's attempts, each with its own output: what `orca logs` prints.
//!
//! Every attempt that stops running (however it stops: its end, a retry, a
//! stop, a lost machine, the sweep, a cancel) leaves a row in
//! `orca.attempts` (migration 19, written by a trigger in the statement
//! that ends it): its number, times, outcome, exit and why, and its own
//! last 64 KiB of output. The attempt running now is read from the run
//! itself (`sql/run_attempts.sql`). `orca logs` prints each under a header
//! line ([`header`]); `orca logs -f` follows them one after another
//! ([`Printer`]).

use postgres::Client;

use crate::db::sql;
use crate::follow::Follow;

/// One attempt of a run, as `orca logs` prints it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Attempt {
    /// Its number (`runs.start` when it ran).
    pub attempt: i32,
    /// How many attempts the run may have (1 + its pipeline's retries, or
    /// more when it had more: stops and lost machines count none).
    pub tries: i32,
    /// It runs now.
    pub running: bool,
    /// How it came out: succeeded, failed, cancelled, requeued (or running).
    pub outcome: String,
    /// Its exit code.
    pub exit_code: Option<i32>,
    /// The signal that ended it.
    pub exit_signal: Option<i32>,
    /// Why, as its supervisor (or whoever ended it) said.
    pub why: Option<String>,
    /// When it started (UTC, the database's clock).
    pub started_at: Option<String>,
    /// When it ended (UTC, the database's clock).
    pub ended_at: Option<String>,
    /// Its last 64 KiB of output.
    pub output: Vec<u8>,
}

/// Run `run`'s attempts, oldest first: those from attempt `from` to
/// attempt `to` (each bound only where given).
pub fn list(
    client: &mut Client,
    run: i64,
    from: Option<i32>,
    to: Option<i32>,
) -> Result<Vec<Attempt>, postgres::Error> {
    Ok(client
        .query(sql::RUN_ATTEMPTS, &[&run, &from, &to])?
        .iter()
        .map(|r| Attempt {
            attempt: r.get("attempt"),
            tries: r.get("tries"),
            running: r.get("running"),
            outcome: r.get("outcome"),
            exit_code: r.get("exit_code"),
            exit_signal: r.get("exit_signal"),
            why: r.get("why"),
            started_at: r.get("started_at"),
            ended_at: r.get("ended_at"),
            output: r.get::<_, Option<Vec<u8>>>("output").unwrap_or_default(),
        })
        .collect())
}

/// The line an attempt's output is printed under: `--- attempt 1 of 3:
/// exit 7 at 2026-12-03 19:14:02 UTC: exit code 7 after 0.02s`, or `---
/// attempt 2 of 3: running since …`. (Its `why` with control characters
/// escaped: a machine may have written it.)
pub fn header(a: &Attempt) -> String {
    let head = format!("--- attempt {} of {}", a.attempt, a.tries.max(a.attempt));
    if a.running {
        return format!(
            "{head}: running since {} UTC",
            a.started_at.as_deref().unwrap_or("?")
        );
    }
    let how = match (a.exit_code, a.exit_signal) {
        (Some(c), _) => format!("{} (exit {c})", a.outcome),
        (None, Some(s)) => format!(
            "{} (signal {s}, {})",
            a.outcome,
            crate::runs::signal_name(s)
        ),
        _ => a.outcome.clone(),
    };
    let why = match a.why.as_deref() {
        None | Some("") => String::new(),
        Some(w) => format!(": {}", crate::printable::line(w)),
    };
    format!(
        "{head}: {how} at {} UTC{why}",
        a.ended_at.as_deref().unwrap_or("?")
    )
}

/// `took` seconds in the precision it was measured: `0.02s`, `3.14s`,
/// `42.5s`, `1234s` (three figures, at least; never `0.0s` for a command
/// that ran).
pub fn seconds(took: f64) -> String {
    if !took.is_finite() || took < 0.0 {
        return format!("{took}s");
    }
    if took >= 100.0 {
        format!("{took:.0}s")
    } else if took >= 10.0 {
        format!("{took:.1}s")
    } else if took >= 0.1 {
        format!("{took:.2}s")
    } else {
        format!("{took:.3}s")
    }
}

/// Everything `orca logs` prints for `attempts`: each one's header line,
/// then its output as it is (a newline added after output that doesn't
/// end in one only when another header follows, so that it starts a line).
pub fn printed(attempts: &[Attempt]) -> Vec<u8> {
    let mut out = Vec::new();
    for a in attempts {
        if out.last().is_some_and(|&b| b != b'\n') {
            out.push(b'\n');
        }
        out.extend_from_slice(header(a).as_bytes());
        out.push(b'\n');
        out.extend_from_slice(&a.output);
    }
    out
}

/// Where `orca logs -f` has got to: the attempts whose header it printed,
/// and the output shown of the last of them.
#[derive(Default, Debug)]
pub struct Printer {
    /// The newest attempt whose header was printed (0: none).
    headed: i32,
    /// Its output as shown so far.
    shown: Follow,
    /// Whether what was printed last ended a line.
    mid_line: bool,
}

impl Printer {
    /// Whether a look at attempt `start` needs the attempts read
    /// ([`Printer::attempts`]) first: it is one not headed yet. Those from
    /// [`Printer::from`] on are all it needs.
    pub fn needs_attempts(&self, start: i32) -> bool {
        start > self.headed
    }

    /// The first attempt [`Printer::attempts`] needs: the one followed so
    /// far (its rest), or the first.
    pub fn from(&self) -> i32 {
        self.headed.max(1)
    }

    /// What to print of `attempts` (read because [`Printer::needs_attempts`]):
    /// the rest of the one followed so far, then each newer one's header
    /// and output.
    pub fn attempts(&mut self, attempts: &[Attempt]) -> Vec<u8> {
        let mut out = Vec::new();
        for a in attempts {
            if a.attempt < self.headed {
                continue;
            }
            if a.attempt > self.headed {
                if self.mid_line {
                    out.push(b'\n');
                }
                out.extend_from_slice(header(a).as_bytes());
                out.push(b'\n');
                self.headed = a.attempt;
                self.mid_line = false;
            }
            out.extend(self.output(a.attempt, &a.output));
        }
        out
    }

    /// What is new in attempt `start`'s output as stored now (an attempt
    /// already headed).
    pub fn output(&mut self, start: i32, output: &[u8]) -> Vec<u8> {
        if start != self.headed {
            return Vec::new();
        }
        let new = self.shown.next(start, output).to_vec();
        if let Some(&last) = new.last() {
            self.mid_line = last != b'\n';
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(n: i32, out: &[u8]) -> Attempt {
        Attempt {
            attempt: n,
            tries: 2,
            outcome: "failed".into(),
            exit_code: Some(7),
            why: Some("exit code 7 after 0.02s".into()),
            started_at: Some("2026-12-03 19:14:02".into()),
            ended_at: Some("2026-12-03 19:14:02".into()),
            output: out.to_vec(),
            ..Attempt::default()
        }
    }

    #[test]
    fn a_header_names_the_attempt_how_it_ended_when_and_why() {
        assert_eq!(
            header(&failed(1, b"")),
            "--- attempt 1 of 2: failed (exit 7) at 2026-12-03 19:14:02 UTC: exit code 7 after 0.02s"
        );
        let running = Attempt {
            running: true,
            ..failed(2, b"")
        };
        assert_eq!(
            header(&running),
            "--- attempt 2 of 2: running since 2026-12-03 19:14:02 UTC"
        );
        let killed = Attempt {
            exit_code: None,
            exit_signal: Some(9),
            outcome: "cancelled".into(),
            why: Some("cancelled\n\x1b[2J".into()),
            ..failed(3, b"")
        };
        // Past its allowance: never "3 of 2"; a machine's why escaped.
        assert_eq!(
            header(&killed),
            "--- attempt 3 of 3: cancelled (signal 9, SIGKILL) at 2026-12-03 19:14:02 UTC: cancelled\\n\\x1b[2J"
        );
        let requeued = Attempt {
            exit_code: None,
            outcome: "requeued".into(),
            why: None,
            ..failed(1, b"")
        };
        assert_eq!(
            header(&requeued),
            "--- attempt 1 of 2: requeued at 2026-12-03 19:14:02 UTC"
        );
    }

    #[test]
    fn seconds_keep_the_precision_they_were_measured_in() {
        assert_eq!(seconds(0.0234), "0.023s");
        assert_eq!(seconds(0.25), "0.25s");
        assert_eq!(seconds(3.456), "3.46s");
        assert_eq!(seconds(42.51), "42.5s");
        assert_eq!(seconds(1234.4), "1234s");
        assert_eq!(seconds(0.0004), "0.000s");
    }

    #[test]
    fn every_attempt_is_printed_under_its_header_on_a_line_of_its_own() {
        let out = printed(&[failed(1, b"upstream 503"), failed(2, b"ok\n")]);
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[0].starts_with("--- attempt 1 of 2: failed"));
        assert_eq!(lines[1], "upstream 503");
        assert!(lines[2].starts_with("--- attempt 2 of 2: failed"));
        assert_eq!(lines[3], "ok");
        assert!(text.ends_with("ok\n"));
        // The last output as it is: no newline added.
        let out = printed(&[failed(1, b"a b|c|")]);
        assert!(out.ends_with(b"UTC: exit code 7 after 0.02s\na b|c|"));
    }

    #[test]
    fn following_prints_each_attempt_once_and_the_next_header_as_it_starts() {
        let mut p = Printer::default();
        assert!(p.needs_attempts(1));
        let running = |n, out: &[u8]| Attempt {
            running: true,
            ..failed(n, out)
        };
        let first = p.attempts(&[running(1, b"upst")]);
        assert!(String::from_utf8_lossy(&first).ends_with("UTC\nupst"));
        assert!(!p.needs_attempts(1));
        assert_eq!(p.output(1, b"upstream 5"), b"ream 5");
        // It ended and the retry began between two looks: the rest of the
        // first, then the second's header (on a line of its own) and output.
        assert!(p.needs_attempts(2));
        let both = p.attempts(&[failed(1, b"upstream 503"), running(2, b"ok")]);
        let text = String::from_utf8(both).unwrap();
        assert!(
            text.starts_with("03\n--- attempt 2 of 2: running since"),
            "{text}"
        );
        assert!(text.ends_with("UTC\nok"), "{text}");
        // An older look at attempt 1 prints nothing.
        assert!(p.output(1, b"upstream 503").is_empty());
        assert_eq!(p.output(2, b"ok\nbye\n"), b"\nbye\n");
    }
}
