//! A fault done to the world and undone when its time comes: the machines'
//! and instances' process groups it strikes, the proxies' partitions, each
//! fault recorded with its effect and its end.

use super::*;

impl World {
    /// Machines (or instances) of the stack: process groups.
    fn groups(&mut self, instances: bool) -> Vec<(i32, String)> {
        let Some(stack) = self.stack() else {
            return Vec::new();
        };
        let mut out: Vec<(i32, String)> = local_machines(&stack)
            .into_iter()
            .filter_map(|pid| {
                let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
                let get = |k: &str| {
                    env.split(|&b| b == 0).find_map(|kv| {
                        kv.strip_prefix(format!("{k}=").as_bytes())
                            .map(|v| String::from_utf8_lossy(v).into_owned())
                    })
                };
                let is_instance = get("ORCA_LOCAL_LABELS")?.contains("orca:ec2-runs");
                if is_instance != instances {
                    return None;
                }
                Some((pid, get("ORCA_LOCAL_MACHINE")?))
            })
            .collect();
        if !instances {
            out.extend(self.ec2.groups());
        }
        out.sort();
        out
    }

    /// Sets each proxy to what the partitions in force say.
    fn apply_partitions(&mut self) {
        let mut want: BTreeMap<u32, Mode> = BTreeMap::new();
        for (ns, cut) in self.partitions.values() {
            for n in ns {
                let m = if *cut { Mode::Cut } else { Mode::Stall };
                let e = want.entry(*n).or_insert(Mode::Pass);
                if *e != Mode::Cut {
                    *e = m;
                }
            }
        }
        let get = |n: u32| want.get(&n).copied().unwrap_or(Mode::Pass);
        if self.fleet.mode() != get(0) {
            self.fleet.set(get(0));
        }
        for s in &self.scheds {
            if s.proxy.mode() != get(s.n) {
                s.proxy.set(get(s.n));
            }
        }
    }

    /// Does fault `f` now.
    pub fn inflict(&mut self, f: Fault) {
        let now = uptime();
        match f {
            Fault::KillLeader { restart_after } => {
                let Some(n) = self.leader() else {
                    return self.say("skipped: kill the leader: no scheduler".into());
                };
                let s = self.sched(n);
                s.killed = true;
                s.proc.signal(libc::SIGKILL);
                let pid = s.proc.pid();
                self.record(
                    format!(
                        "kill -9 leader: scheduler {n} (pid {pid}); restart in {restart_after:.1}s"
                    ),
                    Target::Scheduler(pid),
                    Effect::Killed,
                    Some(now),
                );
                self.later.push((now + restart_after, Later::Spawn));
            }
            Fault::StopLeader { secs, join } => {
                let Some(n) = self.leader() else {
                    return self.say("skipped: stop the leader: no scheduler".into());
                };
                let s = self.sched(n);
                if s.stopped {
                    return self.say(format!("skipped: scheduler {n} is stopped already"));
                }
                s.stopped = true;
                s.proc.signal(libc::SIGSTOP);
                let pid = s.proc.pid();
                let rec = self.record(
                    format!(
                        "SIGSTOP leader: scheduler {n} (pid {pid}) for {secs:.1}s{}",
                        if join { ", a new one joins" } else { "" }
                    ),
                    Target::Scheduler(pid),
                    Effect::CutOff,
                    None,
                );
                self.records[rec].blocks = Block::Stopped;
                self.later.push((now + secs, Later::Cont { n, rec }));
                if join {
                    self.spawn("joins while the leader is stopped");
                }
            }
            Fault::Deploy => {
                self.record(
                    "rolling deploy".into(),
                    Target::Nobody,
                    Effect::Other,
                    Some(now),
                );
                self.spawn("a deploy");
            }
            Fault::PgRestart { immediate } => {
                if self.pg_down.is_some() {
                    return self.say("skipped: restart Postgres: it is down".into());
                }
                let rec = self.record(
                    format!(
                        "Postgres restarted ({})",
                        if immediate { "immediate" } else { "fast" }
                    ),
                    Target::All,
                    Effect::CutOff,
                    None,
                );
                if immediate {
                    self.cluster.stop_immediate();
                    self.cluster.start();
                } else {
                    self.cluster.restart();
                }
                self.close(rec);
            }
            Fault::PgDown { secs } => {
                if self.pg_down.is_some() {
                    return self.say("skipped: stop Postgres: it is down".into());
                }
                let rec = self.record(
                    format!("Postgres down for {secs:.1}s"),
                    Target::All,
                    Effect::CutOff,
                    None,
                );
                self.cluster.stop();
                self.pg_down = Some(rec);
                self.later.push((now + secs, Later::PgStart { rec }));
            }
            Fault::Unreachable { secs } => {
                let mut all: Vec<u32> = self.alive().iter().map(|s| s.n).collect();
                all.push(0);
                let rec = self.record(
                    format!("Postgres unreachable (every connection stalls) for {secs:.1}s"),
                    Target::All,
                    Effect::CutOff,
                    None,
                );
                self.records[rec].blocks = Block::Io;
                self.partitions.insert(rec, (all, false));
                self.apply_partitions();
                self.later.push((now + secs, Later::Heal { rec }));
            }
            Fault::Partition { side, cut, secs } => {
                let how = if cut { "cut" } else { "stalled" };
                let (n, target, whom) = match side {
                    Side::Fleet => (0, Target::Fleet, "the fleet".to_string()),
                    Side::Leader | Side::AnyScheduler(_) => {
                        let n = match side {
                            Side::AnyScheduler(pick) => {
                                let alive: Vec<u32> = self.alive().iter().map(|s| s.n).collect();
                                if alive.is_empty() {
                                    None
                                } else {
                                    Some(alive[(pick % alive.len() as u64) as usize])
                                }
                            }
                            _ => self.leader(),
                        };
                        let Some(n) = n else {
                            return self.say("skipped: partition: no scheduler".into());
                        };
                        let pid = self.sched(n).proc.pid();
                        (
                            n,
                            Target::Scheduler(pid),
                            format!("scheduler {n} (pid {pid})"),
                        )
                    }
                };
                let rec = self.record(
                    format!("partition: {whom} {how} from Postgres for {secs:.1}s"),
                    target,
                    Effect::CutOff,
                    None,
                );
                if !cut {
                    self.records[rec].blocks = Block::Io;
                }
                self.partitions.insert(rec, (vec![n], cut));
                self.apply_partitions();
                self.later.push((now + secs, Later::Heal { rec }));
            }
            Fault::KillWorker { pick } => {
                let workers: Vec<(i32, i32)> = self
                    .groups(false)
                    .into_iter()
                    .flat_map(|(g, _)| workers_in(g).into_iter().map(move |p| (p, g)))
                    .collect();
                if workers.is_empty() {
                    return self.say("skipped: kill a worker: none".into());
                }
                let (pid, pgid) = workers[(pick % workers.len() as u64) as usize];
                // SAFETY: kill(2) on a worker of this run's stack.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                self.record(
                    format!("kill -9 worker pid {pid} (machine group {pgid})"),
                    Target::Process { pid, pgid },
                    Effect::Killed,
                    Some(now),
                );
            }
            Fault::KillMachine { pick } | Fault::KillInstance { pick } => {
                let instance = matches!(f, Fault::KillInstance { .. });
                let groups = self.groups(instance);
                let what = if instance { "instance" } else { "machine" };
                if groups.is_empty() {
                    return self.say(format!("skipped: kill -9 {what}: none"));
                }
                let (pgid, name) = groups[(pick % groups.len() as u64) as usize].clone();
                // SAFETY: kill(2) on a process group of this run's stack.
                unsafe { libc::kill(-pgid, libc::SIGKILL) };
                self.record(
                    format!("kill -9 {what} {name} (group {pgid})"),
                    Target::Group(pgid),
                    Effect::Killed,
                    Some(now),
                );
            }
            Fault::StopMachine {
                pick,
                instance,
                secs,
            } => {
                let groups = self.groups(instance);
                let what = if instance { "instance" } else { "machine" };
                if groups.is_empty() {
                    return self.say(format!("skipped: stop a {what}: none"));
                }
                let (pgid, name) = groups[(pick % groups.len() as u64) as usize].clone();
                // SAFETY: kill(2) on a process group of this run's stack.
                unsafe { libc::kill(-pgid, libc::SIGSTOP) };
                let rec = self.record(
                    format!("SIGSTOP {what} {name} (group {pgid}) for {secs:.1}s"),
                    Target::Group(pgid),
                    Effect::CutOff,
                    None,
                );
                self.records[rec].blocks = Block::Stopped;
                self.later.push((
                    now + secs,
                    Later::ContGroup {
                        pgid,
                        instance,
                        rec,
                    },
                ));
            }
            Fault::NeverBoot { whose } => {
                let what = match whose {
                    0 => "local pool machine",
                    1 => "instance",
                    _ => "EC2 pool machine",
                };
                if whose == 2 {
                    self.ec2.never_boot_next();
                } else {
                    self.observer.arm_never_boot(whose == 1);
                }
                self.say(format!("fault: the next {what} made never boots (armed)"));
            }
            Fault::Ec2Fail { secs, retried } => {
                let (answer, what) = if retried {
                    (
                        (503, "Unavailable", "The service is unavailable."),
                        "503 Unavailable",
                    )
                } else {
                    (
                        (403, "UnauthorizedOperation", "You are not authorized."),
                        "UnauthorizedOperation",
                    )
                };
                self.ec2.fail(Some(answer));
                let rec = self.record(
                    format!("EC2 answers every call {what} for {secs:.1}s"),
                    Target::Schedulers,
                    Effect::Other,
                    None,
                );
                if retried {
                    self.records[rec].blocks = Block::Io;
                }
                self.later.push((now + secs, Later::Ec2Heal { rec }));
            }
            Fault::Ec2Hang { secs, ms } => {
                self.ec2.delay(ms);
                let rec = self.record(
                    format!("EC2 answers {:.1}s late for {secs:.1}s", ms as f64 / 1000.0),
                    Target::Schedulers,
                    Effect::Other,
                    None,
                );
                self.records[rec].blocks = Block::Io;
                self.later.push((now + secs, Later::Ec2Heal { rec }));
            }
            Fault::Ec2NoCapacity { secs } => {
                self.ec2.no_capacity(Some("subnet-a"));
                let rec = self.record(
                    format!("EC2 has no capacity in subnet-a for {secs:.1}s"),
                    Target::Nobody,
                    Effect::Other,
                    None,
                );
                self.later.push((now + secs, Later::Ec2Heal { rec }));
            }
            Fault::RetireEc2 { secs } => {
                let file = self.files.1.clone();
                let said = self.register(&file);
                let rec = self.record(
                    format!("every ec2 pipeline retired for {secs:.1}s: {said}"),
                    Target::Nobody,
                    Effect::Other,
                    None,
                );
                self.later.push((now + secs, Later::Reregister { rec }));
            }
            Fault::KillLeaderLeavingStray { restart_after } => {
                let Some(stack) = self.stack() else {
                    return self.say("skipped: leave a stray: no stack id yet".into());
                };
                let Some(n) = self.leader() else {
                    return self
                        .say("skipped: kill the leader, leave a stray: no scheduler".into());
                };
                let s = self.sched(n);
                s.killed = true;
                s.proc.signal(libc::SIGKILL);
                let pid = s.proc.pid();
                // What its make left: a local instance with the stack's
                // labels, its row never written.
                let name = format!("orca-i-stray-{}", self.records.len() + 1);
                let stray = {
                    use std::os::unix::process::CommandExt;
                    std::process::Command::new("sleep")
                        .arg("600")
                        .env("ORCA_LOCAL_MACHINE", &name)
                        .env(
                            "ORCA_LOCAL_LABELS",
                            format!("orca-pool=orca:ec2-runs orca-stack={stack}"),
                        )
                        .process_group(0)
                        .spawn()
                        .unwrap()
                };
                let group = stray.id();
                self.strays.push(stray);
                self.record(
                    format!(
                        "kill -9 leader: scheduler {n} (pid {pid}) between a make and its row \
                         (stray {name}, group {group}); restart in {restart_after:.1}s"
                    ),
                    Target::Scheduler(pid),
                    Effect::Killed,
                    Some(now),
                );
                self.later.push((now + restart_after, Later::Spawn));
            }
            Fault::Ec2LostAnswer => {
                self.ec2.drop_next_answer();
                self.record(
                    "EC2 loses the next RunInstances answer".into(),
                    Target::Nobody,
                    Effect::Other,
                    Some(now),
                );
            }
        }
    }

    /// Does what is due from `later`.
    pub fn due(&mut self, now: f64) {
        let (due, rest): (Vec<_>, Vec<_>) = self.later.drain(..).partition(|(t, _)| *t <= now);
        self.later = rest;
        for (_, l) in due {
            self.undo(l);
        }
    }

    pub(super) fn undo(&mut self, l: Later) {
        match l {
            Later::Cont { n, rec } => {
                let s = self.sched(n);
                s.proc.signal(libc::SIGCONT);
                s.stopped = false;
                self.close(rec);
                self.say(format!("healed: scheduler {n} continues"));
            }
            Later::Heal { rec } => {
                self.partitions.remove(&rec);
                self.apply_partitions();
                self.close(rec);
                let what = self.records[rec].what.clone();
                self.say(format!("healed: {what}"));
            }
            Later::PgStart { rec } => {
                self.cluster.start();
                self.pg_down = None;
                self.close(rec);
                self.say("healed: Postgres is up".into());
            }
            Later::Ec2Heal { rec } => {
                self.ec2.fail(None);
                self.ec2.delay(0);
                self.ec2.no_capacity(None);
                self.close(rec);
                let what = self.records[rec].what.clone();
                self.say(format!("healed: {what}"));
            }
            Later::ContGroup {
                pgid,
                instance,
                rec,
            } => {
                // Only if it is still there (orca may have removed it, and
                // its pid be another's now).
                if self.groups(instance).iter().any(|(g, _)| *g == pgid) {
                    // SAFETY: kill(2) on a process group of this run's stack.
                    unsafe { libc::kill(-pgid, libc::SIGCONT) };
                }
                self.close(rec);
                let what = self.records[rec].what.clone();
                self.say(format!("healed: {what}"));
            }
            Later::Spawn => self.spawn("a restart after kill -9"),
            Later::Reregister { rec } => {
                self.close(rec);
                let file = self.files.0.clone();
                let said = self.register(&file);
                self.say(format!(
                    "healed: the ec2 pipelines registered again: {said}"
                ));
            }
        }
    }
}
