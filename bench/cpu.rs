//! CPU time of this host's processes, from `/proc`: what the fleet and the
//! start-rate sections split by who spent it.

use std::collections::HashMap;

/// Clock ticks a second (`_SC_CLK_TCK`), the unit of [`reading`]'s figures.
pub fn hz() -> f64 {
    // SAFETY: sysconf(3) reads a constant.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).max(1) as f64
}

/// One process's CPU time, in clock ticks.
#[derive(Clone, Copy, Default)]
pub struct Times {
    /// Its parent and its process group.
    pub ppid: i32,
    pub pgrp: i32,
    /// Its own (user and system).
    pub own: u64,
    /// Its children's that it has waited for (user and system).
    pub children: u64,
}

/// Every process's CPU time now, by pid.
pub fn reading() -> HashMap<i32, Times> {
    let mut out = HashMap::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if let Some(t) = of(pid) {
            out.insert(pid, t);
        }
    }
    out
}

/// Process `pid`'s CPU time now, while it lives.
pub fn of(pid: i32) -> Option<Times> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command's closing parenthesis: state, ppid, pgrp, ...,
    // utime, stime, cutime and cstime the 12th to 15th.
    let (_, rest) = stat.rsplit_once(')')?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    Some(Times {
        ppid: num(1) as i32,
        pgrp: num(2) as i32,
        own: num(11) + num(12),
        children: num(13) + num(14),
    })
}

/// The own CPU ticks of the processes `which` picks (pid, parent, group)
/// in `reading`.
pub fn ticks(reading: &HashMap<i32, Times>, which: impl Fn(i32, i32, i32) -> bool) -> u64 {
    reading
        .iter()
        .filter(|(pid, t)| which(**pid, t.ppid, t.pgrp))
        .map(|(_, t)| t.own)
        .sum()
}

/// The postmaster's pid, from its data directory's `postmaster.pid` (the
/// server on this host; `admin` may read the setting), or 0.
pub fn postmaster(admin: &mut postgres::Client) -> i32 {
    let dir: String = admin
        .query_one("SELECT current_setting('data_directory')", &[])
        .map(|r| r.get(0))
        .unwrap_or_default();
    std::fs::read_to_string(format!("{dir}/postmaster.pid"))
        .ok()
        .and_then(|t| t.lines().next().and_then(|l| l.trim().parse().ok()))
        .unwrap_or(0)
}
