//! The faults: what can go wrong, a schedule of them drawn from the seed
//! (the same seed, the same schedule), and the record of what was done to
//! whom and when, which the checker reads to tell a promise broken from a
//! fault's allowed effect.

use crate::rng::Rng;

/// Which scheduler's connection a partition cuts.
#[derive(Clone, Copy, Debug)]
pub enum Side {
    /// The leader's.
    Leader,
    /// Every machine's and instance's (they share one address).
    Fleet,
    /// Some scheduler's (the number picks it among those alive).
    AnyScheduler(u64),
}

/// One fault.
#[derive(Clone, Copy, Debug)]
pub enum Fault {
    /// kill -9 of the leader; a new scheduler starts after `restart_after` s.
    KillLeader {
        /// Seconds until the restart.
        restart_after: f64,
    },
    /// SIGSTOP of the leader for `secs` (past the stale limit), then SIGCONT;
    /// with `join`, a new scheduler starts meanwhile.
    StopLeader {
        /// Seconds stopped.
        secs: f64,
        /// Whether a new scheduler joins while it is stopped.
        join: bool,
    },
    /// A rolling deploy: a new scheduler joins, the old drains.
    Deploy,
    /// Postgres restarted, `-m fast` or `-m immediate`.
    PgRestart {
        /// `-m immediate` (a crash) rather than fast.
        immediate: bool,
    },
    /// Postgres down for `secs`.
    PgDown {
        /// Seconds down.
        secs: f64,
    },
    /// Postgres unreachable for `secs`: every connection of every orca
    /// process stalls.
    Unreachable {
        /// Seconds.
        secs: f64,
    },
    /// One side's connections stall or are cut for `secs`.
    Partition {
        /// Whose.
        side: Side,
        /// Cut (closed) rather than stalled.
        cut: bool,
        /// Seconds.
        secs: f64,
    },
    /// kill -9 of a pool machine's worker (its boot script starts another).
    KillWorker {
        /// Picks among them.
        pick: u64,
    },
    /// kill -9 of a whole pool machine (its process group).
    KillMachine {
        /// Picks among them.
        pick: u64,
    },
    /// kill -9 of an EC2 run's instance (its process group).
    KillInstance {
        /// Picks among them.
        pick: u64,
    },
    /// A pool machine (or an EC2 run's instance) hangs: its process group
    /// is stopped for `secs` (past the lost limit, 8 s, or not), then
    /// continued if it is still there.
    StopMachine {
        /// Picks among them.
        pick: u64,
        /// An instance rather than a pool machine.
        instance: bool,
        /// Seconds stopped.
        secs: f64,
    },
    /// The next machine (or instance) made never boots: stopped as it
    /// starts (local), or never booted (the fake EC2).
    NeverBoot {
        /// Whose: a local pool's machine (0), an EC2 run's instance (1), a
        /// machine of the EC2 pool (2).
        whose: u8,
    },
    /// Every EC2 call fails for `secs`: with a 503 (retried), or refused
    /// (`UnauthorizedOperation`: not retried).
    Ec2Fail {
        /// Seconds.
        secs: f64,
        /// A 503 rather than a refusal.
        retried: bool,
    },
    /// Every EC2 answer comes `ms` late for `secs` (past the client's 10 s
    /// timeout: a hang).
    Ec2Hang {
        /// Seconds.
        secs: f64,
        /// How late.
        ms: u64,
    },
    /// The first location has no capacity for `secs`.
    Ec2NoCapacity {
        /// Seconds.
        secs: f64,
    },
    /// The next RunInstances that makes an instance loses its answer.
    Ec2LostAnswer,
    /// Every `ec2`-placed pipeline retired (the file registered without
    /// them) for `secs`, then registered again: their runs in flight, and
    /// instances, must still be looked after.
    RetireEc2 {
        /// Seconds.
        secs: f64,
    },
    /// kill -9 of the leader between an instance's make and its row: an
    /// instance with the stack's labels that no row holds is left behind
    /// (a local process group); a new scheduler starts after
    /// `restart_after` s and must delete it, whether or not it makes any.
    KillLeaderLeavingStray {
        /// Seconds until the restart.
        restart_after: f64,
    },
}

/// A fault at a time (seconds after the chaos began).
#[derive(Clone, Copy, Debug)]
pub struct Planned {
    /// When.
    pub at: f64,
    /// What.
    pub fault: Fault,
}

/// The schedule of faults for `seconds` of chaos: one every 3-7 s after
/// the first 4, drawn from `rng` alone.
pub fn plan(rng: &mut Rng, seconds: f64) -> Vec<Planned> {
    let mut out = Vec::new();
    let mut at = 4.0;
    while at < seconds {
        let weights = [3, 3, 2, 1, 1, 1, 1, 3, 2, 2, 2, 2, 1, 1, 1, 1, 2, 2, 2];
        let fault = match rng.weighted(&weights) {
            0 => Fault::KillLeader {
                restart_after: rng.range(0.0, 3.0),
            },
            1 => Fault::StopLeader {
                secs: rng.range(4.0, 8.0),
                join: rng.chance(0.5),
            },
            2 => Fault::Deploy,
            3 => Fault::PgRestart { immediate: false },
            4 => Fault::PgRestart { immediate: true },
            5 => Fault::PgDown {
                secs: rng.range(1.0, 7.0),
            },
            6 => Fault::Unreachable {
                secs: rng.range(1.0, 7.0),
            },
            7 => Fault::Partition {
                side: match rng.below(3) {
                    0 => Side::Leader,
                    1 => Side::Fleet,
                    _ => Side::AnyScheduler(rng.next()),
                },
                cut: rng.chance(0.5),
                secs: rng.range(1.0, 9.0),
            },
            8 => Fault::KillWorker { pick: rng.next() },
            9 => Fault::KillMachine { pick: rng.next() },
            10 => Fault::KillInstance { pick: rng.next() },
            11 => Fault::NeverBoot {
                whose: rng.below(3) as u8,
            },
            12 => Fault::Ec2Fail {
                secs: rng.range(2.0, 8.0),
                retried: rng.chance(0.5),
            },
            13 => Fault::Ec2Hang {
                secs: rng.range(2.0, 8.0),
                ms: rng.below(12_000),
            },
            14 => Fault::Ec2NoCapacity {
                secs: rng.range(2.0, 10.0),
            },
            15 => Fault::Ec2LostAnswer,
            16 => Fault::StopMachine {
                pick: rng.next(),
                instance: rng.chance(0.5),
                secs: rng.range(3.0, 14.0),
            },
            17 => Fault::RetireEc2 {
                secs: rng.range(3.0, 10.0),
            },
            _ => Fault::KillLeaderLeavingStray {
                restart_after: rng.range(0.0, 3.0),
            },
        };
        out.push(Planned { at, fault });
        at += rng.range(3.0, 7.0);
    }
    out
}

/// Whom a fault hit.
#[derive(Clone, Debug, PartialEq)]
pub enum Target {
    /// A scheduler, by pid.
    Scheduler(i32),
    /// A machine's or instance's process group.
    Group(i32),
    /// One process (a worker) of a machine's group.
    Process {
        /// The process.
        pid: i32,
        /// Its group.
        pgid: i32,
    },
    /// Every machine and instance (their shared connection).
    Fleet,
    /// Everyone: Postgres itself.
    All,
    /// Every scheduler's tick (EC2 calls are the leader's, made on it).
    Schedulers,
    /// No one in particular (a deploy).
    Nobody,
}

/// Whether a fault holds up its target's loop (its tick), so that what
/// the loop enforces without the database (timeouts) waits too.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Block {
    /// It doesn't.
    No,
    /// Stopped (SIGSTOP): it can do nothing at all.
    Stopped,
    /// A call that doesn't answer (a stalled connection, a hung EC2
    /// endpoint) holds up the loop: defect D1, fixed (see check.rs).
    Io,
}

/// How a fault treats its target.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Effect {
    /// Killed at once: what it supervised dies with it.
    Killed,
    /// Cut off from Postgres (stopped, partitioned, Postgres down) for the
    /// window: what it supervises runs on, unheard.
    CutOff,
    /// Nothing a run's supervisor notices by itself.
    Other,
}

/// What was done, to whom, from when to when (seconds since boot; a kill's
/// window is an instant; a machine that never boots stays cut off until
/// the end).
#[derive(Clone, Debug)]
pub struct Record {
    /// What, in words.
    pub what: String,
    /// Whom.
    pub target: Target,
    /// How.
    pub effect: Effect,
    /// From.
    pub start: f64,
    /// To.
    pub end: f64,
    /// Whether it holds up its target's loop.
    pub blocks: Block,
}

impl Record {
    /// Whether this fault reached the supervisor (`sup`, its group `supg`)
    /// of an attempt; `own_group` is the test's (the schedulers'), so any
    /// other group is the fleet's. A Postgres outage reaches only the fleet:
    /// a live scheduler holds its runs through one.
    pub fn reaches(&self, sup: i32, supg: i32, own_group: i32) -> bool {
        match &self.target {
            Target::Scheduler(pid) => *pid == sup,
            Target::Group(g) => *g == supg,
            Target::Process { pid, .. } => *pid == sup,
            Target::Fleet | Target::All => supg != own_group,
            Target::Schedulers => supg == own_group,
            Target::Nobody => false,
        }
    }
}
