//! The churn's figures read from outside views: machines no live row
//! holds, processes by name, the windows with no leader.

use super::*;

/// Machines alive (the fake EC2's running instances, local machines'
/// process groups) that no live row holds: by name (local) or id (EC2).
pub(super) fn unheld(w: &World, stack: &str) -> BTreeSet<String> {
    let mut c = w.db.client();
    let held: BTreeSet<String> = c
        .query(
            "SELECT name FROM orca.pool_machines WHERE ended_at IS NULL
             UNION SELECT provider_id FROM orca.pool_machines WHERE ended_at IS NULL AND provider_id IS NOT NULL
             UNION SELECT instance FROM orca.instances WHERE ended_at IS NULL",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut out = BTreeSet::new();
    for pid in local_machines(stack) {
        let name = std::fs::read(format!("/proc/{pid}/environ"))
            .ok()
            .and_then(|env| {
                env.split(|&b| b == 0).find_map(|kv| {
                    kv.strip_prefix(b"ORCA_LOCAL_MACHINE=")
                        .map(|v| String::from_utf8_lossy(v).into_owned())
                })
            })
            .unwrap_or_default();
        if !held.contains(&name) {
            out.insert(format!("{name} (local, group {pid})"));
        }
    }
    for (id, name) in w.ec2.live() {
        if !held.contains(&id) {
            out.insert(format!("{id} ({name}, EC2)"));
        }
    }
    out
}

/// A machine removed for idleness later than `idle_seconds` and a pass
/// after it was last busy (its `busy_at` or its last run's end): from then
/// until its removal began, seconds since the epoch by the database's
/// clock.
pub(super) struct Late {
    pub(super) provider: String,
    pub(super) from: f64,
    pub(super) to: f64,
    pub(super) name: String,
}

/// Whether `text` names machine `name` (not merely one whose name begins
/// so: `orca-cl0-98` is not named by `orca-cl0-980`).
pub(super) fn names(text: &str, name: &str) -> bool {
    text.match_indices(name).any(|(i, _)| {
        !text[i + name.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
    })
}

/// The pid a scheduler's event names (`scheduler 7 on host pid 123...`).
pub(super) fn pid_named(why: &str) -> Option<i32> {
    let (_, rest) = why.split_once(" pid ")?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The windows with no leader: each opens at a leader's end in `ends`
/// (when, its pid: killed or drained) if it was the last to take the lead
/// (`leads`: when, whose pid) before then, and closes `pass` after the next
/// lead taken (none: it stays open); merged where they overlap, in order.
pub(super) fn leaderless_windows(
    ends: &[(f64, i32)],
    leads: &[(f64, i32)],
    pass: f64,
) -> Vec<(f64, f64)> {
    let mut each: Vec<(f64, f64)> = ends
        .iter()
        .filter(|&&(t, pid)| {
            leads
                .iter()
                .filter(|l| l.0 <= t)
                .max_by(|x, y| x.0.total_cmp(&y.0))
                .is_some_and(|l| l.1 == pid)
        })
        .map(|&(t, _)| {
            let led = leads
                .iter()
                .map(|l| l.0)
                .filter(|&l| l >= t)
                .fold(f64::INFINITY, f64::min);
            (t, led + pass)
        })
        .collect();
    each.sort_by(|x, y| x.0.total_cmp(&y.0));
    let mut merged: Vec<(f64, f64)> = Vec::new();
    for (a, b) in each {
        match merged.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    merged
}

/// The leaderless windows, each as its length and its start (seconds after
/// the first lead), for the figure's line.
pub(super) fn windows_said(leads: &[(f64, i32)], windows: &[(f64, f64)]) -> String {
    let first = leads.iter().map(|l| l.0).fold(f64::INFINITY, f64::min);
    let each: Vec<String> = windows
        .iter()
        .map(|(a, b)| format!("{:.1}s at {:.0}s", b - a, a - first))
        .collect();
    if each.is_empty() {
        String::new()
    } else {
        format!(": {}", each.join(", "))
    }
}
