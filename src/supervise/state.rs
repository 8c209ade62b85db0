//! What a supervisor's main thread, its heartbeat thread and its watchdog
//! share ([`Shared`], behind one mutex): the attempts to beat, those with a
//! timeout, the cancels and lost attempts a beat found, how far each
//! attempt's output was appended, and the pace of beats.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::link::Handle;
use super::tail::Tail;

/// How often attempts are beaten: a beat a second.
pub const BEAT_SECONDS: f64 = 1.0;

/// One attempt the heartbeat thread beats.
#[derive(Clone)]
pub(super) struct Beat {
    pub(super) id: i64,
    pub(super) start: i32,
    /// Its process's pid (0 until the keeper has told it); `None` once
    /// its process has ended (its end is not written yet).
    pub(super) pid: Option<i32>,
    pub(super) tail: Arc<Tail>,
}

/// An attempt with a timeout, as the watchdog thread holds it.
pub(super) struct Watch {
    pub(super) id: i64,
    pub(super) start: i32,
    /// Its command, as the keeper names it.
    pub(super) handle: Handle,
    /// When its timeout passes.
    pub(super) deadline: Instant,
    /// When the watchdog sent SIGTERM, and whether it has asked the
    /// keeper to kill everything since.
    pub(super) termed: Option<(Instant, bool)>,
}

/// How far an attempt's output has been appended.
#[derive(Clone, Copy)]
pub(super) struct Written {
    /// Where the last append that landed ended in its output stream.
    pub(super) upto: u64,
    /// When it landed.
    pub(super) at: Instant,
}

/// What the main thread, the heartbeat thread and the watchdog share.
pub(super) struct Shared {
    pub(super) beats: Vec<Beat>,
    /// Attempts with a timeout whose processes have not ended yet.
    pub(super) watches: Vec<Watch>,
    pub(super) cancels: HashSet<(i64, i32)>,
    /// Attempts the heartbeat found no longer running at their start.
    pub(super) lost: HashSet<(i64, i32)>,
    pub(super) done: bool,
    /// How far each attempt's output has been appended.
    pub(super) written: HashMap<(i64, i32), Written>,
    /// When a beat last landed, made by either thread.
    pub(super) beaten: Option<Instant>,
    /// How often beats are due now.
    pub(super) every: Duration,
}

impl Default for Shared {
    fn default() -> Self {
        Shared {
            beats: Vec::new(),
            watches: Vec::new(),
            cancels: HashSet::new(),
            lost: HashSet::new(),
            done: false,
            written: HashMap::new(),
            beaten: None,
            every: Duration::from_secs_f64(BEAT_SECONDS),
        }
    }
}
