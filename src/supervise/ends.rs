//! A supervisor's ends not written yet ([`Ends`]): kept in memory until
//! they land, so an outage loses none, and written in one statement where
//! the supervisor's statements allow it, else one by one.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::recorder::Recorder;
use crate::db::{Fault, Link};
use crate::runs::Outcome;

/// An end that could not be written yet: kept until it lands.
pub(super) enum Pending {
    Finish(Outcome),
    Requeue {
        id: i64,
        start: i32,
        why: String,
        output: Vec<u8>,
    },
}

impl Pending {
    /// The attempt, for a log line: `run 5 attempt 1`.
    pub(super) fn named(&self) -> String {
        let (id, start) = self.key();
        format!("run {id} attempt {start}")
    }

    pub(super) fn key(&self) -> (i64, i32) {
        match self {
            Pending::Finish(o) => (o.id, o.start),
            Pending::Requeue { id, start, .. } => (*id, *start),
        }
    }

    /// The same end without what could not be stored (`error` says why):
    /// no output, and a reason that says what was dropped.
    pub(super) fn stripped(self, error: &str) -> Pending {
        match self {
            Pending::Finish(o) => Pending::Finish(o.stripped(error)),
            Pending::Requeue { id, start, .. } => Pending::Requeue {
                id,
                start,
                why: crate::runs::dropped_why("queued again", error),
                output: Vec::new(),
            },
        }
    }
}

/// The ends a supervisor has not written yet, and whether they go in
/// batches now.
#[derive(Default)]
pub(super) struct Ends {
    /// The ends, in the order they came.
    pub(super) pending: Vec<Pending>,
    /// Until when ends are written one by one (a batch failed but for an
    /// outage: a bad one would fail every batch).
    one_by_one_until: Option<Instant>,
}

impl Ends {
    /// The pending attempts' ends (not the attempts to queue again).
    pub(super) fn finishes(&self) -> impl Iterator<Item = &Outcome> {
        self.pending.iter().filter_map(|p| match p {
            Pending::Finish(o) => Some(o),
            Pending::Requeue { .. } => None,
        })
    }

    /// Whether ends may go several at once (in one statement, or riding a
    /// worker's round): not for a minute after a batch that failed but for
    /// an outage.
    pub(super) fn batch(&self) -> bool {
        self.one_by_one_until.is_none_or(|t| Instant::now() >= t)
    }

    /// Ends are written one by one for the next minute.
    pub(super) fn one_by_one_for_a_minute(&mut self) {
        self.one_by_one_until = Some(Instant::now() + Duration::from_secs(60));
    }

    /// Writes pending ends (attempts' ends only with `finishes`; attempts
    /// to queue again always); what can't be written now stays pending.
    pub(super) fn write(&mut self, link: &Link, rec: Recorder, finishes: bool) {
        if !self
            .pending
            .iter()
            .any(|p| finishes || matches!(p, Pending::Requeue { .. }))
        {
            return;
        }
        let mut db = link.lock();
        // Ends first all in one statement where the statements allow it;
        // if that fails but for an outage, one by one (below), so one that
        // can't be stored holds up no other.
        let ends: Vec<&Outcome> = self.finishes().collect();
        let batch = self.batch();
        if let Some(all) = rec
            .finish_all()
            .filter(|_| finishes && batch && ends.len() > 1)
        {
            // At most ENDS_AT_ONCE a statement (what it takes): an outage
            // may leave more pending.
            let mut written: HashSet<(i64, i32)> = HashSet::new();
            let mut down = false;
            for chunk in ends.chunks(crate::runs::ENDS_AT_ONCE) {
                match db.prepared(all, |c, s| crate::runs::write_all(c, s, chunk)) {
                    Ok(states) => {
                        for (o, (_, state)) in chunk.iter().zip(&states) {
                            rec.say_written(o, *state);
                        }
                        written.extend(chunk.iter().map(|o| (o.id, o.start)));
                    }
                    Err(Fault::Down | Fault::Refused(_)) => {
                        down = true;
                        break;
                    }
                    Err(e) => {
                        log::warn!(
                            "{} ends in one statement: {e}; writing ends one by one for a minute",
                            chunk.len()
                        );
                        self.one_by_one_for_a_minute();
                        break;
                    }
                }
            }
            self.pending.retain(|p| match p {
                Pending::Finish(o) => !written.contains(&(o.id, o.start)),
                Pending::Requeue { .. } => true,
            });
            if down {
                return;
            }
        }
        let mut left = Vec::new();
        let mut down = false;
        for p in std::mem::take(&mut self.pending) {
            if down || (!finishes && matches!(p, Pending::Finish(_))) {
                left.push(p);
                continue;
            }
            let result = match &p {
                Pending::Finish(o) => db
                    .prepared(rec.finish(), |c, s| o.write(c, s))
                    .map(|state| rec.say_written(o, state)),
                Pending::Requeue {
                    id,
                    start,
                    why,
                    output,
                } => db
                    .prepared(rec.requeue(), |c, s| {
                        c.query_one(s, &[id, start, why, output])
                    })
                    .map(|_| ()),
            };
            match result {
                Ok(()) => {}
                Err(Fault::Down | Fault::Refused(_)) => {
                    // The rest waits for the next round, not for a timeout each.
                    left.push(p);
                    down = true;
                }
                Err(e @ (Fault::Sql(_) | Fault::Other(_))) => {
                    log::error!("{}: can't record its end: {e}", p.named());
                    left.push(p);
                }
                Err(Fault::Data(e)) => {
                    // What it carried can never be stored: its end is
                    // recorded without it, or the run would stay running
                    // (and beaten) for ever.
                    log::error!(
                        "{}: its end can't be stored as it is ({e}): recording it without its output",
                        p.named()
                    );
                    left.push(p.stripped(&e.message));
                }
            }
        }
        self.pending = left;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_is_named_in_words_in_log_lines() {
        let p = Pending::Requeue {
            id: 5,
            start: 1,
            why: String::new(),
            output: Vec::new(),
        };
        assert_eq!(p.named(), "run 5 attempt 1");
    }
}
