//! Runs: queue, list, logs, events, cancel, pause, and how an attempt's end
//! is written (with its retry and its alert) in one statement.
//!
//! A run's attempt is `(id, start)`: `start` goes up each time the run is
//! started, and every write about an attempt names both, so a late write from
//! an old attempt never lands on a new one.

use postgres::Client;
use postgres::types::{FromSql, Type};
use serde::Serialize;
use std::time::Instant;

use crate::config::Pipeline;
use crate::db::sql;

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Exit {
    /// It exited with this code.
    Code(i32),
    /// A signal ended it.
    Signal(i32),
}

impl Exit {
    /// From a process's wait status.
    pub fn from_status(s: std::process::ExitStatus) -> Exit {
        use std::os::unix::process::ExitStatusExt;
        match (s.code(), s.signal()) {
            (Some(c), _) => Exit::Code(c),
            (None, Some(sig)) => Exit::Signal(sig),
            _ => Exit::Code(-1),
        }
    }

    /// Whether it exited 0.
    pub fn success(self) -> bool {
        self == Exit::Code(0)
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::Code(c) => write!(f, "exit code {c}"),
            Exit::Signal(s) => write!(f, "signal {s} ({})", signal_name(*s)),
        }
    }
}

/// The usual name of a signal.
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGABRT => "SIGABRT",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        libc::SIGBUS => "SIGBUS",
        _ => "signal",
    }
}

/// The states a run can be in, as text (`orca runs --state`).
pub const STATES: &[&str] = &[
    RunState::Queued.as_str(),
    RunState::Running.as_str(),
    RunState::Succeeded.as_str(),
    RunState::Failed.as_str(),
    RunState::Cancelled.as_str(),
];

/// A run's state, as `orca.runs.state` holds it (its CHECK names the same
/// five).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RunState {
    /// Waiting to start.
    Queued,
    /// An attempt runs.
    Running,
    /// Its last attempt exited 0.
    Succeeded,
    /// Its last attempt failed, with no retry left.
    Failed,
    /// Cancelled, queued or running.
    Cancelled,
}

impl RunState {
    /// Every state, in the order a run goes through them.
    pub const ALL: [RunState; 5] = [
        RunState::Queued,
        RunState::Running,
        RunState::Succeeded,
        RunState::Failed,
        RunState::Cancelled,
    ];

    /// The text the database holds (for binds).
    pub const fn as_str(self) -> &'static str {
        match self {
            RunState::Queued => "queued",
            RunState::Running => "running",
            RunState::Succeeded => "succeeded",
            RunState::Failed => "failed",
            RunState::Cancelled => "cancelled",
        }
    }

    /// Whether a run in this state has ended, and if so whether it
    /// succeeded: `None` while it is queued (a retry among them) or running.
    pub const fn ended(self) -> Option<bool> {
        match self {
            RunState::Queued | RunState::Running => None,
            RunState::Succeeded => Some(true),
            RunState::Failed | RunState::Cancelled => Some(false),
        }
    }
}

impl std::fmt::Display for RunState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Text that is not a run's state.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct UnknownState(pub String);

impl std::fmt::Display for UnknownState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "not a run's state: {:?}", self.0)
    }
}

impl std::error::Error for UnknownState {}

impl std::str::FromStr for RunState {
    type Err = UnknownState;

    fn from_str(s: &str) -> Result<RunState, UnknownState> {
        RunState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| UnknownState(s.to_string()))
    }
}

/// Read from a text column (`row.get("state")`); other text is an
/// [`UnknownState`] error.
impl<'a> FromSql<'a> for RunState {
    fn from_sql(
        ty: &Type,
        raw: &'a [u8],
    ) -> Result<RunState, Box<dyn std::error::Error + Sync + Send>> {
        Ok(<&str as FromSql>::from_sql(ty, raw)?.parse()?)
    }

    fn accepts(ty: &Type) -> bool {
        <&str as FromSql>::accepts(ty)
    }
}

/// A run as `orca runs` shows it.
#[derive(Serialize, Debug)]
pub struct RunRow {
    /// Its id.
    pub id: i64,
    /// Its pipeline.
    pub pipeline: String,
    /// queued, running, succeeded, failed or cancelled.
    pub state: String,
    /// Its attempt number (0 before it first started).
    pub start: i32,
    /// A backfill run: not held to `max_runs`.
    pub fill: bool,
    /// Arguments given to `orca run`.
    pub args: Vec<String>,
    /// Who queued it: manual, schedule or sensor.
    pub origin: String,
    /// When it was queued (UTC).
    pub queued_at: Option<String>,
    /// When its latest attempt started.
    pub started_at: Option<String>,
    /// When its latest attempt ended.
    pub ended_at: Option<String>,
    /// Its exit code.
    pub exit_code: Option<i32>,
    /// The signal that ended it.
    pub exit_signal: Option<i32>,
    /// Why it is in its state (timed out, cancelled, requeued, ...).
    pub why: Option<String>,
    /// The host its latest attempt ran on.
    pub host: Option<String>,
    /// The pid of its latest attempt's process group.
    pub pid: Option<i32>,
    /// Why it waits, for a queued run when that is known (`waits::Waiting`,
    /// in words): its retry and when, paused, `max_runs`, its pool, no
    /// leader.
    pub waits: Option<String>,
}

impl RunRow {
    /// What `orca runs` says in its `WHY`: why a queued run waits, when
    /// that is known, then why it is in its state (a retry's failure, say).
    pub fn shown_why(&self) -> String {
        match (self.waits.as_deref(), self.why.as_deref()) {
            (Some(w), None | Some("")) => w.to_string(),
            (Some(w), Some(why)) => format!("{w}; {why}"),
            (None, why) => why.unwrap_or_default().to_string(),
        }
    }
}

/// Which runs `orca runs` lists.
#[derive(Debug, Clone, Default)]
pub struct Filter<'a> {
    /// Only this pipeline's.
    pub pipeline: Option<&'a str>,
    /// Only runs in this state.
    pub state: Option<&'a str>,
    /// Only runs due (queued, past any retry delay) at least this many
    /// seconds ago, by the database's clock.
    pub older_than: Option<f64>,
    /// How many at most, newest first.
    pub limit: i64,
}

/// Lists runs, newest first.
pub fn list(client: &mut Client, filter: &Filter) -> Result<Vec<RunRow>, postgres::Error> {
    Ok(client
        .query(
            sql::RUNS_LIST,
            &[
                &filter.pipeline,
                &filter.state,
                &filter.limit,
                &filter.older_than,
            ],
        )?
        .iter()
        .map(|r| RunRow {
            id: r.get("id"),
            pipeline: r.get("pipeline"),
            state: r.get("state"),
            start: r.get("start"),
            fill: r.get("fill"),
            args: r.get("args"),
            origin: r.get("origin"),
            queued_at: r.get("queued_at"),
            started_at: r.get("started_at"),
            ended_at: r.get("ended_at"),
            exit_code: r.get("exit_code"),
            exit_signal: r.get("exit_signal"),
            why: r.get("why"),
            host: r.get("host"),
            pid: r.get("pid"),
            waits: None,
        })
        .collect())
}

/// How an attempt ended, ready to be written (and kept until it is).
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The run.
    pub id: i64,
    /// The attempt.
    pub start: i32,
    /// Succeeded, failed or cancelled.
    pub state: RunState,
    /// How the process ended, if it ran.
    pub exit: Option<Exit>,
    /// Why, in words.
    pub why: String,
    /// The tail of its output.
    pub output: Vec<u8>,
    /// The pipeline.
    pub pipeline: String,
    /// Its process ran past the pipeline's timeout (for metrics only).
    pub timed_out: bool,
    /// When its supervisor saw its process end (`None`: no process was
    /// measured, e.g. one that could not start): the end is written as
    /// having happened [`Outcome::ago`] before the write.
    pub ended: Option<Instant>,
}

impl Outcome {
    /// The outcome of attempt `(id, start)` of `p`, from how its process ended.
    pub fn new(
        p: &Pipeline,
        id: i64,
        start: i32,
        state: RunState,
        exit: Option<Exit>,
        why: String,
        output: Vec<u8>,
    ) -> Outcome {
        Outcome {
            id,
            start,
            state,
            exit,
            why,
            output,
            pipeline: p.name.clone(),
            timed_out: false,
            ended: None,
        }
    }

    /// How many seconds ago its process ended by its supervisor's
    /// monotonic clock (`None`: not measured), as the end's statement
    /// takes it: the database makes ended_at its now() less this, kept
    /// within the attempt's start and now (migration 0020).
    pub fn ago(&self) -> Option<f64> {
        self.ended.map(|t| t.elapsed().as_secs_f64())
    }

    fn alert_body(&self) -> serde_json::Value {
        let tail = &self.output[self.output.len().saturating_sub(4096)..];
        serde_json::json!({
            "pipeline": self.pipeline,
            "run": self.id,
            "start": self.start,
            "state": RunState::Failed.as_str(),
            "exit_code": match self.exit { Some(Exit::Code(c)) => Some(c), _ => None },
            "exit_signal": match self.exit { Some(Exit::Signal(s)) => Some(s), _ => None },
            "why": pg_text(&self.why),
            "output": pg_text(&String::from_utf8_lossy(tail)),
        })
    }

    /// The same end without its output, its reason saying what was dropped
    /// and why (`error`): what is left can always be stored.
    pub fn stripped(self, error: &str) -> Outcome {
        Outcome {
            why: dropped_why(&format!("ended {}", self.state), error),
            output: Vec::new(),
            ..self
        }
    }

    /// Writes it with `statement` (`sql::RUN_FINISH`, or a worker's
    /// `sql::WORKER_FINISH`; its text or prepared): the run's new state (queued again if a retry of
    /// its pipeline's is left), its events, and its alert. Returns the state
    /// the run is in now, or `None` if the attempt was no longer running
    /// (someone else decided already).
    pub fn write<S>(
        &self,
        client: &mut Client,
        statement: &S,
    ) -> Result<Option<RunState>, postgres::Error>
    where
        S: postgres::ToStatement + ?Sized,
    {
        let (code, signal) = match self.exit {
            Some(Exit::Code(c)) => (Some(c), None),
            Some(Exit::Signal(s)) => (None, Some(s)),
            None => (None, None),
        };
        let body = self.alert_body();
        let ago = self.ago();
        let row = client.query_one(
            statement,
            &[
                &self.id,
                &self.start,
                &self.state.as_str(),
                &code,
                &signal,
                &pg_text(&self.why),
                &self.output,
                &body,
                &ago,
            ],
        )?;
        row.try_get("state")
    }
}

/// The most ends [`write_all`] writes in one statement (what
/// `orca.finish_attempts` takes).
pub const ENDS_AT_ONCE: usize = 1024;

/// Several attempts' ends as the columns a statement takes them in: ids,
/// starts, states, exit codes, signals, whys, outputs, alert bodies and
/// how long ago each process ended ([`Outcome::ago`]; see
/// [`write_all`]; a worker's round carries its ends so too).
pub struct EndColumns<'a> {
    ids: Vec<i64>,
    starts: Vec<i32>,
    states: Vec<&'static str>,
    codes: Vec<Option<i32>>,
    signals: Vec<Option<i32>>,
    whys: Vec<std::borrow::Cow<'a, str>>,
    outputs: Vec<&'a [u8]>,
    bodies: Vec<serde_json::Value>,
    agos: Vec<Option<f64>>,
}

impl<'a> EndColumns<'a> {
    /// The columns of `outcomes`, in order.
    pub fn of(outcomes: &[&'a Outcome]) -> EndColumns<'a> {
        let code = |o: &&Outcome| match o.exit {
            Some(Exit::Code(c)) => Some(c),
            _ => None,
        };
        let signal = |o: &&Outcome| match o.exit {
            Some(Exit::Signal(s)) => Some(s),
            _ => None,
        };
        EndColumns {
            ids: outcomes.iter().map(|o| o.id).collect(),
            starts: outcomes.iter().map(|o| o.start).collect(),
            states: outcomes.iter().map(|o| o.state.as_str()).collect(),
            codes: outcomes.iter().map(code).collect(),
            signals: outcomes.iter().map(signal).collect(),
            whys: outcomes.iter().map(|o| pg_text(&o.why)).collect(),
            outputs: outcomes.iter().map(|o| o.output.as_slice()).collect(),
            bodies: outcomes.iter().map(|o| o.alert_body()).collect(),
            agos: outcomes.iter().map(|o| o.ago()).collect(),
        }
    }

    /// The nine columns, as parameters in their order.
    pub fn params(&self) -> [&(dyn postgres::types::ToSql + Sync); 9] {
        [
            &self.ids,
            &self.starts,
            &self.states,
            &self.codes,
            &self.signals,
            &self.whys,
            &self.outputs,
            &self.bodies,
            &self.agos,
        ]
    }
}

/// Writes the ends of `outcomes` (at most [`ENDS_AT_ONCE`]) with
/// `statement` (`sql::RUNS_FINISH`, its text or prepared), in one
/// statement: as [`Outcome::write`] does each.
/// Each run id with the state its run is in now (`None`: the attempt was no
/// longer running), in order.
pub fn write_all<S>(
    client: &mut Client,
    statement: &S,
    outcomes: &[&Outcome],
) -> Result<Vec<(i64, Option<RunState>)>, postgres::Error>
where
    S: postgres::ToStatement + ?Sized,
{
    let rows = client.query(statement, &EndColumns::of(outcomes).params())?;
    rows.iter()
        .map(|r| Ok((r.try_get("id")?, r.try_get("state")?)))
        .collect()
}

/// `s` as Postgres's `text` and `jsonb` take it: they refuse NUL, which
/// becomes U+FFFD (invalid UTF-8 is already replaced by the lossy reads).
pub fn pg_text(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains('\0') {
        std::borrow::Cow::Owned(s.replace('\0', "\u{FFFD}"))
    } else {
        std::borrow::Cow::Borrowed(s)
    }
}

/// The reason recorded for an end that could not be stored as it was:
/// `what` happened, `error` is why the rest was dropped (cut to 200
/// characters, made storable).
pub fn dropped_why(what: &str, error: &str) -> String {
    let error: String = error.chars().take(200).collect();
    format!(
        "{what}; its end could not be stored as it was ({}), so its output and reason were dropped",
        pg_text(&error)
    )
}

/// What `orca cancel` found.
pub enum Cancelled {
    /// No such run.
    Unknown,
    /// It was queued and is cancelled now.
    Now,
    /// It is running: its supervisor has been asked to stop it.
    Asked,
    /// It runs and its cancel was already asked (nothing recorded again).
    AlreadyAsked,
    /// It had already ended, in this state.
    AlreadyEnded(String),
}

/// Cancels a run (see [`Cancelled`]).
pub fn cancel(client: &mut Client, id: i64) -> Result<Cancelled, postgres::Error> {
    let why = format!("orca cancel by {}", whoami());
    loop {
        let state: Option<String> = client
            .query_one(sql::RUN_CANCEL, &[&id, &why])?
            .get("state");
        return Ok(match state.as_deref() {
            None => Cancelled::Unknown,
            Some("now:cancelled") => Cancelled::Now,
            Some("now:asked") => Cancelled::Asked,
            Some("already:asked") => Cancelled::AlreadyAsked,
            Some(s) => match s.parse() {
                // Started (or queued again) while the statement ran: again.
                Ok(RunState::Queued | RunState::Running) => continue,
                _ => Cancelled::AlreadyEnded(s.to_string()),
            },
        });
    }
}

/// Who is at the keyboard, for events: `user@host`.
pub fn whoami() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        // SAFETY: getuid(2) can't fail.
        .unwrap_or_else(|_| format!("uid {}", unsafe { libc::getuid() }));
    format!("{user}@{}", hostname())
}

/// This machine's host name.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    if ok && end > 0 {
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        "localhost".into()
    }
}

/// What became of an attempt whose supervisor was lost, by the state its
/// run is in after it was handed back (a pipeline's `on_lost`: "retry"
/// queues it again, "fail" fails it, migration 22), for a log line.
pub fn lost_outcome(state: &str) -> &'static str {
    match state {
        "queued" => "queued again",
        "cancelled" => "cancelled (a cancel was asked for)",
        "failed" => "failed, not run again (on_lost = \"fail\"; `orca retry` runs it)",
        _ => "ended",
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_lost_attempt_is_said_by_what_became_of_it() {
        assert_eq!(lost_outcome("queued"), "queued again");
        assert!(lost_outcome("failed").contains("on_lost"));
        assert!(lost_outcome("cancelled").starts_with("cancelled"));
    }
    use super::*;

    #[test]
    fn every_run_state_round_trips_through_its_text() {
        for state in RunState::ALL {
            assert_eq!(state.as_str().parse::<RunState>(), Ok(state));
            assert_eq!(state.to_string(), state.as_str());
        }
        let texts: Vec<&str> = RunState::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(texts, STATES);
    }

    #[test]
    fn text_that_is_no_run_state_is_refused() {
        for text in ["", "Queued", "done", "now:asked", "failed "] {
            assert_eq!(
                text.parse::<RunState>(),
                Err(UnknownState(text.to_string()))
            );
        }
        assert_eq!(
            UnknownState("done".into()).to_string(),
            "not a run's state: \"done\""
        );
    }

    #[test]
    fn a_run_state_is_read_from_text_columns_only() {
        assert!(<RunState as FromSql>::accepts(&Type::TEXT));
        assert!(<RunState as FromSql>::accepts(&Type::VARCHAR));
        assert!(!<RunState as FromSql>::accepts(&Type::INT4));
        assert_eq!(
            RunState::from_sql(&Type::TEXT, b"cancelled").unwrap(),
            RunState::Cancelled
        );
        let e = RunState::from_sql(&Type::TEXT, b"done").unwrap_err();
        assert!(e.downcast_ref::<UnknownState>().is_some(), "{e}");
    }

    fn outcome(why: &str, output: &[u8]) -> Outcome {
        Outcome {
            id: 7,
            start: 2,
            state: RunState::Failed,
            exit: Some(Exit::Code(1)),
            why: why.into(),
            output: output.to_vec(),
            pipeline: "p".into(),
            timed_out: false,
            ended: None,
        }
    }

    #[test]
    fn an_end_is_sent_as_how_long_ago_its_process_ended_or_not_at_all() {
        let mut o = outcome("x", b"");
        assert_eq!(o.ago(), None, "no process measured: the write's time");
        let two = std::time::Duration::from_secs(2);
        o.ended = Some(Instant::now() - two);
        let ago = o.ago().unwrap();
        assert!((2.0..3.0).contains(&ago), "{ago}");
        // Kept by an end stripped of its output.
        assert!(o.stripped("too big").ago().unwrap() >= ago);
    }

    #[test]
    fn text_for_postgres_has_no_nul() {
        assert_eq!(pg_text("a\0b"), "a\u{FFFD}b");
        assert!(matches!(pg_text("plain"), std::borrow::Cow::Borrowed(_)));
        let body = outcome("why\0", b"out\0put\xff").alert_body().to_string();
        assert!(!body.contains("\\u0000"), "{body}");
    }

    #[test]
    fn a_stripped_end_keeps_its_attempt_state_and_exit_and_says_what_was_dropped() {
        let o = outcome("exit code 1", b"lots").stripped("invalid byte sequence \0 here");
        assert_eq!((o.id, o.start, o.state.as_str()), (7, 2, "failed"));
        assert_eq!(o.exit, Some(Exit::Code(1)));
        assert!(o.output.is_empty());
        assert!(
            o.why
                .starts_with("ended failed; its end could not be stored"),
            "{}",
            o.why
        );
        assert!(!o.why.contains('\0'));
        let long = "x".repeat(10_000);
        assert!(dropped_why("queued again", &long).len() < 400);
    }
}
