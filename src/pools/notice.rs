//! Spot notices (issue #35, stage 2a): what a pool machine's instance
//! metadata says of its future, decided here, pure.
//!
//! EC2 tells a spot instance two things ahead, on its instance metadata
//! (IMDS): `spot/instance-action` (`{"action":"terminate","time":"…"}`,
//! 404 while there is none) says it is interrupted at that time, about two
//! minutes on; `events/recommendations/rebalance` (`{"noticeTime":"…"}`,
//! 404 while none) says it is at raised risk of one. An on-demand instance
//! never gets either, so a notice is acted on whatever the market.
//!
//! [`decide`] reads the two answers (each bounded: [`ANSWER_MAX`]; one that
//! can't be read is no notice, with a warning its caller says once), and
//! [`grace`] is the SIGTERM grace the machine's running runs get so that
//! it ends before EC2's time does. The poll that asks IMDS is
//! [`crate::pools::interrupt`].

use chrono::{DateTime, Utc};

/// The most of an answer read: a notice is a few dozen bytes.
pub const ANSWER_MAX: usize = 4096;

/// How long before EC2's termination time the runs' grace ends: what is
/// left for their ends to be written (and their SIGKILL to land).
pub const MARGIN_SECONDS: f64 = 20.0;

/// One metadata answer, as the poll got it.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// 404: nothing to say.
    Missing,
    /// 200, with its body (at most [`ANSWER_MAX`] bytes read).
    Body(Vec<u8>),
}

/// What the machine is told, most pressing first.
#[derive(Debug, Clone, PartialEq)]
pub enum Notice {
    /// Nothing: it goes on.
    Nothing,
    /// A rebalance recommendation (at `at`, as EC2 said it): a drain,
    /// nothing new is taken; its runs finish.
    Drain {
        /// Its `noticeTime`.
        at: DateTime<Utc>,
    },
    /// An interruption: the instance is stopped, hibernated or terminated
    /// at `at`.
    Interrupted {
        /// `terminate`, `stop` or `hibernate`.
        action: String,
        /// When EC2 acts (its clock, UTC).
        at: DateTime<Utc>,
    },
}

impl Notice {
    /// How pressing it is: nothing (0) < a drain (1) < an interruption (2).
    pub fn rank(&self) -> u8 {
        match self {
            Notice::Nothing => 0,
            Notice::Drain { .. } => 1,
            Notice::Interrupted { .. } => 2,
        }
    }

    /// The event kind it is recorded as (`machine` and the machine row's
    /// `notice`, migration 31).
    pub fn kind(&self) -> &'static str {
        match self {
            Notice::Nothing => "",
            Notice::Drain { .. } => "draining",
            Notice::Interrupted { .. } => "interrupted",
        }
    }
}

#[derive(serde::Deserialize)]
struct InstanceAction {
    action: String,
    time: String,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Rebalance {
    notice_time: String,
}

fn text<'a>(body: &'a [u8], what: &str) -> Result<&'a str, String> {
    if body.len() > ANSWER_MAX {
        return Err(format!(
            "{what}: an answer of over {ANSWER_MAX} bytes, taken for none"
        ));
    }
    std::str::from_utf8(body).map_err(|_| format!("{what}: not UTF-8, taken for none"))
}

/// Reads `spot/instance-action`: `Ok(None)` on 404.
pub fn instance_action(a: &Answer) -> Result<Option<Notice>, String> {
    const WHAT: &str = "spot/instance-action";
    let Answer::Body(body) = a else {
        return Ok(None);
    };
    let t = text(body, WHAT)?;
    let ia: InstanceAction = serde_json::from_str(t).map_err(|e| {
        format!(
            "{WHAT}: unreadable ({:?} error), taken for none",
            e.classify()
        )
    })?;
    if !matches!(ia.action.as_str(), "terminate" | "stop" | "hibernate") {
        return Err(format!(
            "{WHAT}: action {:?} is none of terminate, stop, hibernate: taken for none",
            crate::printable::line(&ia.action.chars().take(40).collect::<String>())
        ));
    }
    let at = DateTime::parse_from_rfc3339(ia.time.trim())
        .map_err(|_| format!("{WHAT}: its time is not RFC 3339: taken for none"))?
        .with_timezone(&Utc);
    Ok(Some(Notice::Interrupted {
        action: ia.action,
        at,
    }))
}

/// Reads `events/recommendations/rebalance`: `Ok(None)` on 404.
pub fn rebalance(a: &Answer) -> Result<Option<Notice>, String> {
    const WHAT: &str = "events/recommendations/rebalance";
    let Answer::Body(body) = a else {
        return Ok(None);
    };
    let t = text(body, WHAT)?;
    let r: Rebalance = serde_json::from_str(t).map_err(|e| {
        format!(
            "{WHAT}: unreadable ({:?} error), taken for none",
            e.classify()
        )
    })?;
    let at = DateTime::parse_from_rfc3339(r.notice_time.trim())
        .map_err(|_| format!("{WHAT}: its noticeTime is not RFC 3339: taken for none"))?
        .with_timezone(&Utc);
    Ok(Some(Notice::Drain { at }))
}

/// What the two answers say, the more pressing first (an interruption
/// over a drain), and the warnings of those that could not be read (each
/// taken for none).
pub fn decide(action: &Answer, rebalance_: &Answer) -> (Notice, Vec<String>) {
    let mut warnings = Vec::new();
    let mut notice = Notice::Nothing;
    for r in [instance_action(action), rebalance(rebalance_)] {
        match r {
            Ok(Some(n)) if n.rank() > notice.rank() => notice = n,
            Ok(_) => {}
            Err(w) => warnings.push(w),
        }
    }
    (notice, warnings)
}

/// The SIGTERM grace of the runs of a machine interrupted with `left`
/// seconds to go: `ORCA_KILL_GRACE_SECONDS` (`kill_grace`), or less so that
/// it ends [`MARGIN_SECONDS`] before EC2's time; at least a second.
pub fn grace(kill_grace: f64, left: f64) -> f64 {
    let left = if left.is_finite() { left } else { 0.0 };
    kill_grace.min(left - MARGIN_SECONDS).max(1.0)
}

/// The why of the requeue of an attempt handed back by interruption `n`
/// of machine `machine`.
pub fn why(machine: &str, n: &Notice) -> String {
    match n {
        Notice::Interrupted { action, at } => format!(
            "interrupted: machine {machine} got a spot interruption notice ({action} at {}); handed back without counting an attempt",
            at.format("%Y-%m-%d %H:%M:%S UTC")
        ),
        Notice::Drain { at } => format!(
            "machine {machine} got a rebalance recommendation at {}",
            at.format("%Y-%m-%d %H:%M:%S UTC")
        ),
        Notice::Nothing => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(s: &str) -> Answer {
        Answer::Body(s.as_bytes().to_vec())
    }

    #[test]
    fn no_answer_is_nothing() {
        assert_eq!(
            decide(&Answer::Missing, &Answer::Missing),
            (Notice::Nothing, vec![])
        );
    }

    #[test]
    fn an_instance_action_is_an_interruption_at_its_time() {
        for action in ["terminate", "stop", "hibernate"] {
            let (n, w) = decide(
                &body(&format!(
                    r#"{{"action":"{action}","time":"2026-12-05T09:30:00Z"}}"#
                )),
                &Answer::Missing,
            );
            assert!(w.is_empty());
            assert_eq!(
                n,
                Notice::Interrupted {
                    action: action.into(),
                    at: "2026-12-05T09:30:00Z".parse().unwrap()
                }
            );
        }
    }

    #[test]
    fn a_rebalance_is_a_drain_and_an_interruption_wins_over_it() {
        let reb = body(r#"{"noticeTime":"2026-12-05T09:28:00Z"}"#);
        assert_eq!(
            decide(&Answer::Missing, &reb).0,
            Notice::Drain {
                at: "2026-12-05T09:28:00Z".parse().unwrap()
            }
        );
        let ia = body(r#"{"action":"terminate","time":"2026-12-05T09:30:00Z"}"#);
        assert_eq!(decide(&ia, &reb).0.rank(), 2);
        assert_eq!(decide(&ia, &reb).0.kind(), "interrupted");
    }

    #[test]
    fn a_bad_answer_is_nothing_with_a_warning() {
        for bad in [
            "not json",
            r#"{"action":"explode","time":"2026-12-05T09:30:00Z"}"#,
            r#"{"action":"terminate","time":"soon"}"#,
            r#"{"action":"terminate"}"#,
            "",
        ] {
            let (n, w) = decide(&body(bad), &Answer::Missing);
            assert_eq!(n, Notice::Nothing, "{bad}");
            assert_eq!(w.len(), 1, "{bad}");
            assert!(w[0].starts_with("spot/instance-action: "), "{w:?}");
        }
        let (n, w) = decide(&Answer::Missing, &body(r#"{"noticeTime":42}"#));
        assert_eq!((n, w.len()), (Notice::Nothing, 1));
        // A bad rebalance answer doesn't hide an interruption.
        let (n, w) = decide(
            &body(r#"{"action":"stop","time":"2026-12-05T09:30:00Z"}"#),
            &body("{"),
        );
        assert_eq!((n.rank(), w.len()), (2, 1));
    }

    #[test]
    fn an_answer_too_long_or_not_utf8_is_nothing() {
        let long = format!(
            r#"{{"action":"terminate","time":"2026-12-05T09:30:00Z","x":"{}"}}"#,
            "a".repeat(ANSWER_MAX)
        );
        let (n, w) = decide(&body(&long), &Answer::Missing);
        assert_eq!((n, w.len()), (Notice::Nothing, 1));
        let (n, w) = decide(&Answer::Body(vec![0xff, 0xfe]), &Answer::Missing);
        assert_eq!((n, w.len()), (Notice::Nothing, 1));
    }

    #[test]
    fn the_grace_ends_before_ec2_s_two_minutes_do() {
        // Plenty of time: the kill grace as set.
        assert_eq!(grace(10.0, 120.0), 10.0);
        // A long kill grace is cut to the time left less the margin.
        assert_eq!(grace(300.0, 120.0), 100.0);
        // Little or no time left (or a time already past): a second.
        assert_eq!(grace(10.0, 25.0), 5.0);
        assert_eq!(grace(10.0, 5.0), 1.0);
        assert_eq!(grace(10.0, -30.0), 1.0);
        assert_eq!(grace(0.0, 120.0), 1.0);
        assert_eq!(grace(10.0, f64::NAN), 1.0);
    }

    #[test]
    fn the_why_says_interrupted_and_when() {
        let n = Notice::Interrupted {
            action: "terminate".into(),
            at: "2026-12-05T09:30:00Z".parse().unwrap(),
        };
        let w = why("orca-p-3", &n);
        assert!(w.starts_with("interrupted: machine orca-p-3 "), "{w}");
        assert!(w.contains("terminate at 2026-12-05 09:30:00 UTC"), "{w}");
    }
}
