//! Alerts: a JSON POST to a pipeline's `alert` URL when a run fails for good.
//!
//! The final failure and its alert are written in one statement (the outbox,
//! `orca.alerts`), so no alert is lost to a crash. This thread, on the
//! connection the scheduler's heartbeat shares (taken a statement at a
//! time, never while a webhook is being sent), sends what is due: an
//! attempt that fails is tried again with a doubling backoff, up to
//! [`MAX_ATTEMPTS`]; the tick never waits on it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::db::Link;
use crate::db::sql;
use crate::lead::Known;

/// How many times an alert is tried before orca gives up on it.
pub const MAX_ATTEMPTS: i32 = 10;

/// Sends due alerts every second, while `leads` (alerts are the leader's to
/// send), until `done` is set.
pub fn run(db: Link, leads: Known, done: Arc<AtomicBool>) {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(10))
        .build();
    while !done.load(Ordering::SeqCst) {
        let rows = if leads.leads() {
            db.lock()
                .prepared(sql::ALERTS_CLAIM, |c, s| c.query(s, &[]))
        } else {
            Ok(Vec::new())
        };
        if let Ok(rows) = rows {
            for r in rows {
                if done.load(Ordering::SeqCst) {
                    break;
                }
                let id: i64 = r.get("id");
                let url: String = r.get("url");
                let body: serde_json::Value = r.get("body");
                let shown = redact_url(&url);
                let result = agent
                    .post(&url)
                    .set("Content-Type", "application/json")
                    .send_string(&body.to_string());
                let outcome = match result {
                    Ok(_) => db
                        .lock()
                        .run(|c| c.execute(sql::ALERT_SENT, &[&id, &shown])),
                    Err(e) => {
                        let why = match e {
                            ureq::Error::Status(code, _) => {
                                format!("{shown} answered HTTP {code}")
                            }
                            ureq::Error::Transport(t) => {
                                format!("{shown}: {}", t.kind())
                            }
                        };
                        log::warn!("alert {id}: {why}");
                        db.lock()
                            .run(|c| c.execute(sql::ALERT_FAILED, &[&id, &why, &MAX_ATTEMPTS]))
                    }
                };
                if let Err(e) = outcome {
                    log::warn!("alert {id}: can't record the attempt: {e}");
                }
            }
        }
        let until = Instant::now() + Duration::from_secs(1);
        while Instant::now() < until && !done.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A URL fit for a log line: no user info, no query string (webhook URLs
/// often carry their token there).
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let rest = rest.split(['?', '#']).next().unwrap_or("");
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let host = authority.rsplit('@').next().unwrap_or(authority);
    let path = if path.len() > 1 { "/…" } else { path };
    format!("{scheme}://{host}{path}")
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn urls_lose_their_secrets() {
        assert_eq!(
            redact_url("https://user:pw@hooks.example.com/services/T0/B0/secret?x=1"),
            "https://hooks.example.com/…"
        );
        assert_eq!(redact_url("http://127.0.0.1:8080"), "http://127.0.0.1:8080");
    }
}
