//! EC2 runs' decisions (seed 000, the scheduler's side), pure: each takes
//! plain data [`crate::warm_pool::leader`] read and returns what to do; that module
//! reads, calls them and acts. (What `sql/` decides stays there: which idle
//! instance is handed over, `sql/instance_hand_over.sql`; which instances
//! are over, `sql/instances_to_end.sql`; which heads are lost,
//! `sql/ec2_lost_heads.sql`.) Unit-tested below.
//!
//! * [`Fill`]: the instances a run still needs, in order (the head, then its
//!   workers: [`Role`]), and the head's address each is given.
//! * [`MakeBudget`]: how many new instances a tick may still make
//!   (`ORCA_EC2_MAKE_PER_TICK`); warm hand-overs take none of it.
//! * [`source`]: where an instance a run needs comes from once the
//!   hand-over was tried: the warm one, a new one, or the next ticks.
//! * [`lost_head`]: what becomes of a run whose head is lost.
//! * [`trim`]: of the instances ended, which are deleted now and whose
//!   login is revoked first.
//! * [`strays_due`]: whether strays are looked for this tick.
//! * [`upkeep`]: whether EC2 runs' upkeep runs this tick, and whether the
//!   database must be asked first.

/// `ORCA_EC2_MAKE_PER_TICK`'s default: new instances one tick makes at most.
pub const MAKE_PER_TICK: usize = 8;

/// `ORCA_EC2_MAKE_PER_TICK` as set (`None`: unset): a whole number from 1
/// to 1000, [`MAKE_PER_TICK`] when unset or blank.
pub fn make_per_tick(set: Option<&str>) -> Result<usize, String> {
    match set {
        None => Ok(MAKE_PER_TICK),
        Some(v) if v.trim().is_empty() => Ok(MAKE_PER_TICK),
        Some(v) => match v.trim().parse::<usize>() {
            Ok(n) if (1..=1000).contains(&n) => Ok(n),
            _ => Err(format!(
                "ORCA_EC2_MAKE_PER_TICK={v} is out of range: a whole number from 1 to 1000"
            )),
        },
    }
}

/// How many new instances a tick may still make (`ORCA_EC2_MAKE_PER_TICK`).
#[derive(Debug)]
pub struct MakeBudget {
    per_tick: usize,
    left: usize,
}

impl MakeBudget {
    /// `per_tick` a tick, all of them left.
    pub fn new(per_tick: usize) -> MakeBudget {
        MakeBudget {
            per_tick,
            left: per_tick,
        }
    }

    /// How many a tick may make.
    pub fn per_tick(&self) -> usize {
        self.per_tick
    }

    /// A new tick: all of them left again.
    pub fn refill(&mut self) {
        self.left = self.per_tick;
    }

    /// Whether one more may be made this tick.
    pub fn any_left(&self) -> bool {
        self.left > 0
    }

    /// None left this tick (its time ran out first).
    pub fn spend(&mut self) {
        self.left = 0;
    }

    /// Takes one; false (and nothing taken) if none is left.
    pub fn take(&mut self) -> bool {
        let ok = self.left > 0;
        self.left = self.left.saturating_sub(1);
        ok
    }
}

/// Whether a run's attempt `start` takes new code on its instances: its
/// first start does; a retry keeps its first's.
pub fn takes_new_code(start: i32) -> bool {
    start == 1
}

/// Where an instance a run needs comes from, once the hand-over of a warm
/// one was tried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source<W> {
    /// A warm instance was handed over (what the hand-over returned): it
    /// takes none of the budget.
    Warm(W),
    /// None was warm: a new one is made, taking one of the tick's budget.
    Make,
    /// None was warm and the tick may make no more: the run gets the rest
    /// on the next ticks (before any new run is claimed).
    NextTick,
}

/// Where a needed instance comes from: the warm one the hand-over gave, if
/// it gave one; else a new one if one of `budget` is left (taken).
pub fn source<W>(warm: Option<W>, budget: &mut MakeBudget) -> Source<W> {
    match warm {
        Some(w) => Source::Warm(w),
        None if budget.take() => Source::Make,
        None => Source::NextTick,
    }
}

/// An instance's part in its run, as `orca.instances.role` stores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The head: runs the driver beside the head service.
    Head,
    /// A worker: runs the worker service until the run is over.
    Worker,
}

impl Role {
    /// The stored text: `head` or `worker`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Head => "head",
            Role::Worker => "worker",
        }
    }

    /// The role stored as `text`, if it is one.
    pub fn of(text: &str) -> Option<Role> {
        match text {
            "head" => Some(Role::Head),
            "worker" => Some(Role::Worker),
            _ => None,
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One instance a run still needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Need {
    /// Its place: 0 the head, then the workers.
    pub n: usize,
    /// The head (place 0) or a worker.
    pub role: Role,
    /// The head's address it is given (`-` for the head itself).
    pub address: String,
}

/// A run's fill, role by role: the instances it still needs, each with
/// the address of its head (the head's own once it has one).
#[derive(Debug)]
pub struct Fill {
    roles: std::ops::Range<usize>,
    head_host: String,
}

impl Fill {
    /// A run with `made` instance rows of its head and `workers` workers,
    /// its head's own address `head_host` (`""`: none known yet, so
    /// `127.0.0.1` until its head has one).
    pub fn new(made: usize, workers: i32, head_host: &str) -> Fill {
        let all = usize::try_from(workers).unwrap_or(0) + 1;
        Fill {
            roles: made..all.max(made),
            head_host: if head_host.is_empty() {
                "127.0.0.1".into()
            } else {
                head_host.into()
            },
        }
    }

    /// The next instance it needs, if any.
    pub fn next_need(&mut self) -> Option<Need> {
        let n = self.roles.next()?;
        Some(Need {
            n,
            role: if n == 0 { Role::Head } else { Role::Worker },
            address: if n == 0 {
                "-".into()
            } else {
                self.head_host.clone()
            },
        })
    }

    /// `need` got an instance whose own address is `host` (warm or new):
    /// a head's is what its workers are given.
    pub fn got(&mut self, need: &Need, host: &str) {
        if need.n == 0 && !host.is_empty() {
            self.head_host = host.into();
        }
    }
}

/// What becomes of a run whose head instance is lost.
#[derive(Clone, Debug, PartialEq)]
pub enum LostHead {
    /// It served the run and went silent: the run is queued again.
    Requeue(String),
    /// It never started serving within the boot limit (a bad AMI, say): a
    /// failed attempt, so retries and the alert apply.
    Fail(String),
}

impl LostHead {
    /// Why, as the run's and its instances' ends say.
    pub fn why(&self) -> &str {
        match self {
            LostHead::Requeue(why) | LostHead::Fail(why) => why,
        }
    }
}

/// A run's lost head (`served`: it served the run before it went silent;
/// `boot`: `ORCA_POOL_BOOT_SECONDS`): what becomes of the run.
pub fn lost_head(served: bool, boot: f64) -> LostHead {
    if served {
        LostHead::Requeue("its head instance was lost".into())
    } else {
        LostHead::Fail(format!(
            "its head instance never started serving within {boot}s"
        ))
    }
}

/// An instance whose row was ended, to delete where it was made (a row of
/// `sql/instances_to_end.sql` or `sql/instances_of_run_end.sql`).
#[derive(Clone, Debug, PartialEq)]
pub struct Ended {
    /// Its name (`orca-i-N`).
    pub name: String,
    /// The provider kind its row stores (`fleet::stored_kind`).
    pub provider: String,
    /// The provider's id for it.
    pub provider_id: Option<String>,
    /// The region it was made in, if the provider has regions.
    pub region: Option<String>,
    /// Its login role.
    pub login: String,
}

/// What [`trim`] decided.
#[derive(Debug, PartialEq)]
pub struct Trim {
    /// Ended: deleted now, their logins revoked.
    pub delete: Vec<Ended>,
    /// Over, but its login holds its row: `(name, login)`, the login
    /// revoked now (its sessions ended) so the row is ended on a later tick.
    pub revoke_first: Vec<(String, String)>,
}

/// Of the instances `sql/instances_to_end.sql` found over (each with
/// whether its row was ended), which are deleted now and whose login is
/// revoked first.
pub fn trim(over: Vec<(Ended, bool)>) -> Trim {
    let mut t = Trim {
        delete: Vec::new(),
        revoke_first: Vec::new(),
    };
    for (e, ended) in over {
        if ended {
            t.delete.push(e);
        } else {
            t.revoke_first.push((e.name, e.login));
        }
    }
    t
}

/// Whether strays are looked for now: never yet (`last`: seconds since they
/// last were, `None`), or once `every` seconds (`ORCA_POOL_SCALE_SECONDS`)
/// have passed.
pub fn strays_due(last: Option<f64>, every: f64) -> bool {
    last.is_none_or(|ago| ago >= every)
}

/// Whether EC2 runs' upkeep (their instances made, lost heads, what is
/// over ended, strays) runs this tick.
#[derive(Debug, PartialEq, Eq)]
pub enum Upkeep {
    /// Yes: an EC2 pipeline is registered.
    Run,
    /// Only if the database says an EC2 run is running or an instance row
    /// is live (a retired pipeline's run, its instances).
    Ask,
    /// No: nothing was live when last asked in this lead, and no EC2
    /// pipeline has been registered since (none can start a run).
    Skip,
}

/// Whether the upkeep runs: `registered`, an EC2 pipeline is registered;
/// `new_lead`, this is the lead's first tick (what another leader left is
/// not known); `live`, what the last ask (or tick with one registered)
/// found. Nothing new can become live without a registered EC2 pipeline,
/// so a lead that found nothing asks no more until one is registered.
pub fn upkeep(registered: bool, new_lead: bool, live: bool) -> Upkeep {
    if registered {
        Upkeep::Run
    } else if new_lead || live {
        Upkeep::Ask
    } else {
        Upkeep::Skip
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upkeep_goes_on_while_anything_may_be_live_without_a_registered_pipeline() {
        assert_eq!(upkeep(true, false, false), Upkeep::Run);
        assert_eq!(upkeep(true, true, false), Upkeep::Run);
        // The last EC2 pipeline retired: asked while something was live,
        // and on a new lead's first tick.
        assert_eq!(upkeep(false, false, true), Upkeep::Ask);
        assert_eq!(upkeep(false, true, false), Upkeep::Ask);
        // Nothing live and none registered: no statement a tick.
        assert_eq!(upkeep(false, false, false), Upkeep::Skip);
    }

    fn roles(made: usize, workers: i32) -> Vec<(usize, &'static str)> {
        let mut f = Fill::new(made, workers, "h");
        std::iter::from_fn(|| f.next_need().map(|n| (n.n, n.role.as_str()))).collect()
    }

    #[test]
    fn the_roles_a_run_still_needs() {
        assert_eq!(roles(0, 2), [(0, "head"), (1, "worker"), (2, "worker")]);
        assert_eq!(roles(2, 3), [(2, "worker"), (3, "worker")]);
        assert_eq!(roles(3, 2), []);
        assert_eq!(roles(0, 0), [(0, "head")]);
        assert_eq!(roles(0, -1), [(0, "head")]);
    }

    #[test]
    fn a_tick_makes_at_most_its_budget() {
        let mut b = MakeBudget::new(2);
        assert!(b.any_left());
        assert!(b.take() && b.take());
        assert!(!b.any_left() && !b.take());
        b.refill();
        assert!(b.any_left() && b.take());
        assert_eq!(b.per_tick(), 2);
        // A tick whose time for provider calls ran out makes no more.
        b.refill();
        b.spend();
        assert!(!b.any_left() && !b.take());
        assert_eq!(b.per_tick(), 2);
    }

    #[test]
    fn the_budget_is_a_whole_number_from_1_to_1000_and_8_unset() {
        assert_eq!(make_per_tick(None), Ok(8));
        assert_eq!(make_per_tick(Some(" ")), Ok(8));
        assert_eq!(make_per_tick(Some(" 3 ")), Ok(3));
        assert_eq!(make_per_tick(Some("1000")), Ok(1000));
        for bad in ["0", "1001", "-1", "2.5", "x"] {
            assert_eq!(
                make_per_tick(Some(bad)),
                Err(format!(
                    "ORCA_EC2_MAKE_PER_TICK={bad} is out of range: a whole number from 1 to 1000"
                ))
            );
        }
    }

    fn needs(f: &mut Fill) -> Vec<Need> {
        std::iter::from_fn(|| f.next_need()).collect()
    }

    fn need(n: usize, role: &'static str, address: &str) -> Need {
        Need {
            n,
            role: Role::of(role).expect("a role"),
            address: address.into(),
        }
    }

    #[test]
    fn a_run_gets_its_head_then_its_workers_told_the_heads_address() {
        let mut f = Fill::new(0, 2, "");
        let head = f.next_need().unwrap();
        assert_eq!(head, need(0, "head", "-"));
        f.got(&head, "10.0.0.5");
        assert_eq!(
            needs(&mut f),
            [need(1, "worker", "10.0.0.5"), need(2, "worker", "10.0.0.5")]
        );
    }

    #[test]
    fn a_head_with_no_address_of_its_own_is_the_local_host() {
        let mut f = Fill::new(0, 1, "");
        let head = f.next_need().unwrap();
        f.got(&head, "");
        assert_eq!(needs(&mut f), [need(1, "worker", "127.0.0.1")]);
    }

    #[test]
    fn a_run_short_of_instances_gets_the_rest_with_its_heads_address() {
        let mut f = Fill::new(2, 3, "10.0.0.9");
        assert_eq!(
            needs(&mut f),
            [need(2, "worker", "10.0.0.9"), need(3, "worker", "10.0.0.9")]
        );
        // One with all it needs (or more: workers lowered) needs nothing.
        assert!(needs(&mut Fill::new(4, 2, "h")).is_empty());
        assert!(needs(&mut Fill::new(1, 0, "h")).is_empty());
    }

    #[test]
    fn only_a_runs_first_start_takes_new_code() {
        assert!(takes_new_code(1));
        assert!(!takes_new_code(2));
    }

    #[test]
    fn a_head_lost_after_serving_queues_its_run_again_and_one_never_serving_fails_it() {
        assert_eq!(
            lost_head(true, 900.0),
            LostHead::Requeue("its head instance was lost".into())
        );
        let never = lost_head(false, 900.0);
        assert_eq!(
            never,
            LostHead::Fail("its head instance never started serving within 900s".into())
        );
        assert_eq!(
            never.why(),
            "its head instance never started serving within 900s"
        );
    }

    fn ended(name: &str) -> Ended {
        Ended {
            name: name.into(),
            provider: "ec2".into(),
            provider_id: Some(format!("i-{name}")),
            region: None,
            login: format!("login_{name}"),
        }
    }

    #[test]
    fn ended_instances_are_deleted_and_one_its_login_holds_has_the_login_revoked_first() {
        let t = trim(vec![
            (ended("a"), true),
            (ended("b"), false),
            (ended("c"), true),
        ]);
        assert_eq!(t.delete, [ended("a"), ended("c")]);
        assert_eq!(t.revoke_first, [("b".into(), "login_b".into())]);
    }

    #[test]
    fn a_warm_instance_takes_no_budget_and_a_new_one_waits_for_the_next_tick_once_it_is_spent() {
        let mut b = MakeBudget::new(1);
        assert_eq!(source(Some("orca-i-1"), &mut b), Source::Warm("orca-i-1"));
        assert!(b.any_left(), "a hand-over made nothing");
        assert_eq!(source(None::<&str>, &mut b), Source::Make);
        assert!(!b.any_left());
        assert_eq!(source(None::<&str>, &mut b), Source::NextTick);
        // A warm one is still handed over with the budget spent.
        assert_eq!(source(Some("orca-i-2"), &mut b), Source::Warm("orca-i-2"));
        b.refill();
        assert_eq!(source(None::<&str>, &mut b), Source::Make);
    }

    #[test]
    fn strays_are_looked_for_at_once_then_once_a_scale_interval() {
        assert!(strays_due(None, 30.0));
        assert!(!strays_due(Some(29.9), 30.0));
        assert!(strays_due(Some(30.0), 30.0));
    }

    #[test]
    fn roles_are_stored_as_head_and_worker() {
        for role in [Role::Head, Role::Worker] {
            assert_eq!(Role::of(role.as_str()), Some(role));
            assert_eq!(role.to_string(), role.as_str());
        }
        assert_eq!(Role::of("driver"), None);
    }
}
