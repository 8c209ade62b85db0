//! Beats: one statement, on the supervisor's one connection, that beats
//! its attempts, appends what each printed since its last append
//! ([`appends`]) and, a worker's, writes the ends it carries and claims its
//! next runs ([`beat`]); and the heartbeat thread, which beats whenever the
//! main loop doesn't (or is late).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use postgres::Row;

use super::recorder::Recorder;
use super::state::{BEAT_SECONDS, Beat, Shared, Written};
use super::tail::TAIL_BYTES;
use crate::db::{Db, Fault, Link};
use crate::runs::{Outcome, RunState};

/// What an attempt printed since its last append is appended at its next
/// beat when it is at most this much (a run printing less a second has its
/// output in the database within a second of printing it)...
const APPEND_AT_ONCE: u64 = 16 * 1024;

/// ... and otherwise once this long has passed since its last append (its
/// last 64 KiB at most): a chatty run costs the database at most about
/// 16 KiB a second, however much it prints.
const APPEND_EVERY_SECONDS: f64 = 4.0;

/// What a beat appends to one attempt's output.
struct Append {
    id: i64,
    start: i32,
    /// Where `bytes` begin in its output stream.
    at: u64,
    bytes: Vec<u8>,
}

/// The appends due in a beat at `now`, given how far each attempt's output
/// was appended: for each attempt whose process runs, what it printed
/// since; at once if that is at most [`APPEND_AT_ONCE`] or nothing was
/// appended yet, else once [`APPEND_EVERY_SECONDS`] have passed since the
/// last append (only the last 64 KiB of it is kept anyway).
fn appends(beats: &[Beat], written: &HashMap<(i64, i32), Written>, now: Instant) -> Vec<Append> {
    let wait = Duration::from_secs_f64(APPEND_EVERY_SECONDS);
    let mut out = Vec::new();
    for b in beats.iter().filter(|b| b.pid.is_some()) {
        let last = written.get(&(b.id, b.start));
        let upto = last.map_or(0, |w| w.upto);
        let new = b.tail.total().saturating_sub(upto);
        if new == 0 {
            continue;
        }
        if new > APPEND_AT_ONCE && last.is_some_and(|w| now.duration_since(w.at) < wait) {
            continue;
        }
        let (at, bytes) = b.tail.since(upto);
        debug_assert!(bytes.len() <= TAIL_BYTES);
        out.push(Append {
            id: b.id,
            start: b.start,
            at,
            bytes,
        });
    }
    out
}

/// One beat, on `db`, of the attempts `shared` holds, with what they
/// printed since (and `room` runs claimed, a worker's round): cancels and
/// lost attempts go back to the main thread, appends that landed are
/// remembered. Returns the rows of the runs claimed.
pub(super) fn beat(
    db: &mut Db,
    shared: &Mutex<Shared>,
    rec: Recorder,
    room: i32,
    ends: &[&Outcome],
) -> Result<Round, Fault> {
    let now = Instant::now();
    let (beats, appends) = {
        let s = shared.lock().expect("shared");
        // An attempt whose end this round carries is ended, not beaten.
        let beats: Vec<Beat> = s
            .beats
            .iter()
            .filter(|b| !ends.iter().any(|o| (o.id, o.start) == (b.id, b.start)))
            .cloned()
            .collect();
        let appends = appends(&beats, &s.written, now);
        (beats, appends)
    };
    if !rec.beat_idle() && beats.is_empty() && room == 0 && ends.is_empty() {
        shared.lock().expect("shared").beaten = Some(now);
        return Ok(Round::default());
    }
    let ids: Vec<i64> = beats.iter().map(|b| b.id).collect();
    let starts: Vec<i32> = beats.iter().map(|b| b.start).collect();
    let pids: Vec<i32> = beats.iter().map(|b| b.pid.unwrap_or(0)).collect();
    let out_ids: Vec<i64> = appends.iter().map(|a| a.id).collect();
    let out_starts: Vec<i32> = appends.iter().map(|a| a.start).collect();
    let out_at: Vec<i64> = appends
        .iter()
        .map(|a| i64::try_from(a.at).unwrap_or(i64::MAX))
        .collect();
    let out_bytes: Vec<&[u8]> = appends.iter().map(|a| a.bytes.as_slice()).collect();
    let mut params: Vec<&(dyn postgres::types::ToSql + Sync)> = vec![
        &ids,
        &starts,
        &pids,
        &out_ids,
        &out_starts,
        &out_at,
        &out_bytes,
    ];
    // A worker's round claims too (`room` runs at most), and writes the
    // ends it carries.
    let columns = crate::runs::EndColumns::of(ends);
    if rec.claims() {
        params.push(&room);
        params.extend(columns.params());
    }
    let rows = db.prepared(rec.beat(), |c, statement| c.query(statement, &params))?;
    let mut round = Round::default();
    let mut cancels = Vec::new();
    let mut beaten = HashSet::new();
    for r in rows {
        if rec.claims() {
            match r.get::<_, &str>("kind") {
                "claimed" => {
                    round.claimed.push(r);
                    continue;
                }
                "ended" => {
                    let state = r
                        .try_get("state")
                        .map_err(|e| Fault::Other(format!("a round's end: {e}")))?;
                    round.ended.push((r.get("id"), r.get("start"), state));
                    continue;
                }
                _ => {}
            }
        }
        let id: i64 = r.get("id");
        beaten.insert(id);
        if r.get::<_, bool>("cancel")
            && let Some(b) = beats.iter().find(|b| b.id == id)
        {
            cancels.push((id, b.start));
        }
    }
    // A process whose attempt is no longer running at its start (queued
    // again and started elsewhere): the main thread kills it.
    let lost = beats
        .iter()
        .filter(|b| b.pid.is_some() && !beaten.contains(&b.id))
        .map(|b| (b.id, b.start));
    let mut s = shared.lock().expect("shared");
    s.beaten = Some(now);
    s.cancels.extend(cancels);
    s.lost.extend(lost);
    for a in appends.iter().filter(|a| beaten.contains(&a.id)) {
        let upto = a.at + a.bytes.len() as u64;
        s.written.insert((a.id, a.start), Written { upto, at: now });
    }
    let live: HashSet<(i64, i32)> = s.beats.iter().map(|b| (b.id, b.start)).collect();
    s.written.retain(|k, _| live.contains(k));
    Ok(round)
}

/// What a worker's round came to: the rows of the runs it claimed, and
/// each end it carried with the state its run is in now (`None`: the
/// attempt was no longer running there).
#[derive(Default)]
pub(super) struct Round {
    pub(super) claimed: Vec<Row>,
    pub(super) ended: Vec<(i64, i32, Option<RunState>)>,
}

/// The heartbeat thread: beats the attempts the main thread supervises
/// whenever a beat is due (every second; when the main loop beats itself,
/// a worker's, only once none has landed for a beat and a half: its main
/// loop stalled, or its rounds fail), which collects cancel requests and
/// lost attempts and appends their output. It tries at most once a beat.
pub(super) fn heartbeat_loop(link: Link, shared: Arc<Mutex<Shared>>, rec: Recorder) {
    let late = |s: &Shared| {
        let after = if rec.claims() {
            s.every + s.every / 2
        } else {
            s.every
        };
        s.beaten.is_none_or(|t| t.elapsed() >= after)
    };
    let mut tried: Option<Instant> = None;
    let mut looked = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let (due, every) = {
            let s = shared.lock().expect("shared");
            if s.done {
                return;
            }
            let any = rec.beat_idle() || !s.beats.is_empty();
            (any && late(&s), s.every)
        };
        if due && tried.is_none_or(|t| t.elapsed() >= every) {
            let mut db = link.lock();
            // The main loop may have beaten meanwhile, holding the connection.
            if late(&shared.lock().expect("shared")) {
                tried = Some(Instant::now());
                if rec.claims() {
                    log::debug!("no beat landed for a beat and a half: beating");
                }
                if db.ensure() {
                    let _ = beat(&mut db, &shared, rec, 0, &[]);
                }
            }
            looked = Instant::now();
        } else if looked.elapsed() >= Duration::from_secs_f64(BEAT_SECONDS) {
            // Reconnect even with nothing to beat, so an outage's end is
            // seen (and logged) when it ends, not when the next run starts.
            link.lock().ensure();
            looked = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supervise::tail::Tail;

    fn beating(id: i64, pid: Option<i32>, printed: &[u8]) -> Beat {
        let tail = Arc::new(Tail::default());
        tail.push(printed);
        Beat {
            id,
            start: 1,
            pid,
            tail,
        }
    }

    #[test]
    fn output_is_appended_from_where_the_last_append_ended() {
        let now = Instant::now();
        let mut written = HashMap::new();
        let beats = [
            beating(1, Some(7), b"hello world"),
            beating(2, Some(0), b"quiet"),
            beating(3, None, b"ended: its end carries it"),
        ];
        // Nothing appended yet: everything; an ended process: nothing.
        let first = appends(&beats, &written, now);
        let got: Vec<(i64, u64, &[u8])> = first
            .iter()
            .map(|a| (a.id, a.at, a.bytes.as_slice()))
            .collect();
        assert_eq!(got, [(1, 0, &b"hello world"[..]), (2, 0, &b"quiet"[..])]);
        // Appended up to byte 6 of 1 and all of 2: the rest of 1 only.
        written.insert((1, 1), Written { upto: 6, at: now });
        written.insert((2, 1), Written { upto: 5, at: now });
        let next = appends(&beats, &written, now);
        assert_eq!(next.len(), 1);
        assert_eq!((next[0].id, next[0].at), (1, 6));
        assert_eq!(next[0].bytes, b"world");
    }

    #[test]
    fn a_chatty_attempt_s_output_is_appended_every_few_seconds_its_last_64_kib() {
        let now = Instant::now();
        let chatty = [beating(1, Some(7), &vec![b'x'; 200 * 1024])];
        let mut written = HashMap::new();
        written.insert((1, 1), Written { upto: 10, at: now });
        // Much more than a beat's worth since an append a moment ago: later.
        assert!(appends(&chatty, &written, now).is_empty());
        let later = now + Duration::from_secs_f64(APPEND_EVERY_SECONDS);
        let due = appends(&chatty, &written, later);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].at, (200 - 64) * 1024);
        assert_eq!(due[0].bytes.len(), TAIL_BYTES);
        // A beat's worth is appended at once, however recent the last.
        written.insert(
            (1, 1),
            Written {
                upto: 200 * 1024 - 100,
                at: now,
            },
        );
        assert_eq!(appends(&chatty, &written, now)[0].bytes.len(), 100);
    }
}
