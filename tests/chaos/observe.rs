//! What actually runs, seen from `/proc` by a thread of the test: every
//! process of a run (its environment carries the chaos run's token and
//! `ORCA_RUN_ID`/`ORCA_RUN_START`, which its children inherit), when it was
//! first and last seen and when it was first found gone; and the stack's
//! machines and instances (process groups labelled with its id), so that a
//! new one can be stopped before it boots ("a machine that never boots").

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Seconds since boot (`CLOCK_BOOTTIME`, what `/proc/uptime` counts): the
/// ledger's clock.
pub fn uptime() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// A process of a run's attempt, as seen.
#[derive(Clone, Debug)]
pub struct Seen {
    /// Its pid.
    pub pid: i32,
    /// The run and the attempt (from its environment).
    pub run: i64,
    /// The attempt.
    pub start: i32,
    /// Its command line, for evidence.
    pub cmdline: String,
    /// Its supervisor (the parent of the `orca __keeper` above it: a
    /// scheduler, a worker, `ec2-serve`) and that one's process group, when
    /// found (-1: not).
    pub sup: i32,
    /// The supervisor's group.
    pub supg: i32,
    /// First and last seen alive (uptime).
    pub first: f64,
    /// Last seen alive.
    pub last: f64,
    /// The first scan that found it gone.
    pub gone: Option<f64>,
}

/// A machine or instance that was stopped as it was made.
#[derive(Clone, Debug)]
pub struct Stopped {
    /// Its process group.
    pub pgid: i32,
    /// Its name.
    pub name: String,
    /// When it was stopped, and how long after it was first seen.
    pub at: f64,
    /// Seconds after it was first seen.
    pub after: f64,
    /// When a scan last found it still stopped.
    pub checked: f64,
    /// When it was last found stopped, if a later scan found it running
    /// (or gone): the kernel continues a stopped group whose parent's exit
    /// orphans it, so a machine "that never boots" boots once the
    /// scheduler that made it dies. orca can't have seen it before then.
    pub resumed: Option<f64>,
}

#[derive(Default)]
struct State {
    /// By (pid, start time in ticks): a reused pid is another process.
    procs: HashMap<(i32, u64), Seen>,
    stack: Option<String>,
    /// Machine and instance groups seen: (pgid, its start time) → (name,
    /// first seen).
    groups: HashMap<(i32, u64), (String, f64)>,
    stopped: Vec<Stopped>,
    /// When a scan last ended.
    scanned: f64,
}

/// The watching thread; stops on drop.
pub struct Observer {
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    /// How many of the next new machines or instances to stop at birth.
    armed: Arc<AtomicU32>,
    /// Whether the next one armed is an instance (else a pool machine).
    armed_instance: Arc<AtomicBool>,
}

fn environ(pid: i32) -> Option<Vec<u8>> {
    std::fs::read(format!("/proc/{pid}/environ")).ok()
}

fn var<'a>(env: &'a [u8], key: &str) -> Option<&'a [u8]> {
    env.split(|&b| b == 0)
        .find_map(|kv| kv.strip_prefix(key.as_bytes())?.strip_prefix(b"="))
}

/// Field `n` (1-based, as proc(5) numbers them; from 3 on) of
/// `/proc/PID/stat`.
fn stat_field(pid: i32, n: usize) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace().nth(n - 3)?.parse().ok()
}

/// The state of a process (field 3 of `/proc/PID/stat`: `T` stopped).
fn stat_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// The start time of a process, in ticks.
fn started(pid: i32) -> Option<u64> {
    stat_field(pid, 22)
}

/// The supervisor of a run's process and its group: the parent of the
/// nearest `orca __keeper` above it.
fn supervisor(pid: i32) -> (i32, i32) {
    let mut p = pid;
    for _ in 0..8 {
        let Some(parent) = stat_field(p, 4) else {
            break;
        };
        let parent = parent as i32;
        if parent <= 1 {
            break;
        }
        let cmd = std::fs::read(format!("/proc/{parent}/cmdline")).unwrap_or_default();
        if cmd.split(|&b| b == 0).any(|a| a == b"__keeper") {
            let sup = stat_field(parent, 4).map_or(-1, |s| s as i32);
            let supg = stat_field(sup, 5).map_or(-1, |g| g as i32);
            return (sup, supg);
        }
        p = parent;
    }
    (-1, -1)
}

fn pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

impl Observer {
    /// Starts watching for processes carrying `token`.
    pub fn start(token: &str) -> Observer {
        let o = Observer {
            state: Arc::default(),
            stop: Arc::default(),
            armed: Arc::default(),
            armed_instance: Arc::default(),
        };
        let (state, stop, armed, armed_instance) = (
            o.state.clone(),
            o.stop.clone(),
            o.armed.clone(),
            o.armed_instance.clone(),
        );
        let token = token.to_string();
        std::thread::spawn(move || {
            let mut full_at = 0.0;
            while !stop.load(Ordering::SeqCst) {
                let now = uptime();
                if now - full_at >= 0.2 {
                    full_at = now;
                    scan_runs(&state, &token);
                }
                scan_groups(&state, &armed, &armed_instance);
                state.lock().unwrap().scanned = uptime();
                let pause = if armed.load(Ordering::SeqCst) > 0 {
                    30
                } else {
                    100
                };
                std::thread::sleep(Duration::from_millis(pause));
            }
        });
        o
    }

    /// Sets the stack whose machines are watched.
    pub fn set_stack(&self, stack: &str) {
        self.state.lock().unwrap().stack = Some(stack.to_string());
    }

    /// Stops the next new machine (or instance) of the stack as it is made.
    pub fn arm_never_boot(&self, instance: bool) {
        self.armed_instance.store(instance, Ordering::SeqCst);
        self.armed.fetch_add(1, Ordering::SeqCst);
    }

    /// Gives up stopping machines not made yet.
    pub fn disarm(&self) {
        self.armed.store(0, Ordering::SeqCst);
    }

    /// Machines and instances stopped at birth so far.
    pub fn stopped(&self) -> Vec<Stopped> {
        self.state.lock().unwrap().stopped.clone()
    }

    /// Every run process seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().procs.values().cloned().collect()
    }

    /// Waits for one whole scan that began after now.
    pub fn settle(&self) {
        let t = uptime();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while self.state.lock().unwrap().scanned < t + 0.25 {
            assert!(std::time::Instant::now() < deadline, "the observer stopped");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn scan_runs(state: &Mutex<State>, token: &str) {
    let t = uptime();
    let mut alive = Vec::new();
    for pid in pids() {
        let Some(env) = environ(pid) else { continue };
        if var(&env, "CHAOS_TOKEN") != Some(token.as_bytes()) {
            continue;
        }
        let num = |k: &str| {
            var(&env, k)
                .and_then(|v| std::str::from_utf8(v).ok())
                .and_then(|v| v.parse::<i64>().ok())
        };
        let (Some(run), Some(start)) = (num("ORCA_RUN_ID"), num("ORCA_RUN_START")) else {
            continue;
        };
        let Some(since) = started(pid) else { continue };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|c| {
                String::from_utf8_lossy(&c)
                    .replace('\0', " ")
                    .trim()
                    .to_string()
            })
            .unwrap_or_default();
        alive.push(((pid, since), run, start as i32, cmdline));
    }
    let sups: HashMap<(i32, u64), (i32, i32)> = {
        let known = state.lock().unwrap();
        alive
            .iter()
            .filter(|a| !known.procs.contains_key(&a.0))
            .map(|a| (a.0, supervisor(a.0.0)))
            .collect()
    };
    let mut s = state.lock().unwrap();
    let keys: std::collections::HashSet<(i32, u64)> = alive.iter().map(|a| a.0).collect();
    for (key, run, start, cmdline) in alive {
        s.procs
            .entry(key)
            .and_modify(|p| p.last = t)
            .or_insert_with(|| {
                let (sup, supg) = sups.get(&key).copied().unwrap_or((-1, -1));
                Seen {
                    pid: key.0,
                    run,
                    start,
                    cmdline,
                    sup,
                    supg,
                    first: t,
                    last: t,
                    gone: None,
                }
            });
    }
    for (key, p) in s.procs.iter_mut() {
        if p.gone.is_none() && !keys.contains(key) {
            p.gone = Some(t);
        }
    }
}

/// The parent of process `pid`, from `/proc/PID/stat`.
fn parent(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn scan_groups(state: &Mutex<State>, armed: &AtomicU32, armed_instance: &AtomicBool) {
    let Some(stack) = state.lock().unwrap().stack.clone() else {
        return;
    };
    let want = format!("orca-stack={stack}");
    let t = uptime();
    for s in state
        .lock()
        .unwrap()
        .stopped
        .iter_mut()
        .filter(|s| s.resumed.is_none())
    {
        if stat_state(s.pgid).is_some_and(|c| c == 'T' || c == 't') {
            s.checked = t;
        } else {
            s.resumed = Some(s.checked);
        }
    }
    for pid in pids() {
        // SAFETY: getpgid(2) only reads.
        if unsafe { libc::getpgid(pid) } != pid {
            continue;
        }
        let Some(since) = started(pid) else { continue };
        if state.lock().unwrap().groups.contains_key(&(pid, since)) {
            continue;
        }
        let Some(env) = environ(pid) else { continue };
        let Some(labels) = var(&env, "ORCA_LOCAL_LABELS") else {
            continue;
        };
        let labels = String::from_utf8_lossy(labels);
        if !labels.split_whitespace().any(|l| l == want) {
            continue;
        }
        // A machine's own process starting a run: between its fork (or
        // vfork) and its exec, a child in a session of its own still shows
        // the machine's environment. A machine's boot process is started by
        // a scheduler (or the fake EC2), which has no machine labels.
        // (Seed 72: such a child, stopped as a machine "that never boots",
        // held its worker's spawn for good.)
        let parent_is_machine = parent(pid)
            .and_then(environ)
            .is_some_and(|penv| var(&penv, "ORCA_LOCAL_LABELS").is_some());
        if parent_is_machine {
            continue;
        }
        let name = var(&env, "ORCA_LOCAL_MACHINE")
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .unwrap_or_default();
        let instance = labels.contains("orca-pool=orca:ec2-runs");
        let mut s = state.lock().unwrap();
        s.groups.insert((pid, since), (name.clone(), t));
        if armed.load(Ordering::SeqCst) > 0 && armed_instance.load(Ordering::SeqCst) == instance {
            armed.fetch_sub(1, Ordering::SeqCst);
            // SAFETY: kill(2) on the machine's process group, which the
            // scheduler under test made for this test's stack.
            unsafe { libc::kill(-pid, libc::SIGSTOP) };
            s.stopped.push(Stopped {
                pgid: pid,
                name,
                at: uptime(),
                after: uptime() - t,
                checked: uptime(),
                resumed: None,
            });
        }
    }
}
