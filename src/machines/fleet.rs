//! The providers a leader's machines come from, one `Fleet` the scheduler
//! owns and lends to the pool scaler and to EC2 runs alike: one local
//! provider, EC2 clients by region (made once; one that can't be made is
//! tried again only after one back-off), this stack's id (read once), and
//! the one way to make a machine ([`Fleet::make`], `machines::make`), to
//! end one ([`Fleet::end`]) and to find and delete strays
//! ([`Fleet::listed`], [`Fleet::delete_strays`]).
//!
//! Invariants:
//! * A login is revoked (no more logins, its sessions ended) before it is
//!   dropped, and before its machine is deleted at its provider.
//! * An EC2 client that could not be made is not tried again for
//!   `ORCA_POOL_TRY_SECONDS`: meanwhile the same why is said.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use postgres::Client;

use crate::config::Provider as Kind;
use crate::db::Fault;
use crate::lead::{DutyError, Term};
use crate::machines::{logins, walk};
use crate::providers::{Listed, Provider, ec2::Ec2, local::Local};

/// When a tick's provider work is over: no new step (a pool's, a make, a
/// scan for strays) begins after `soft`, and no provider call is sent after
/// `hard` (one sent before waits past it by at most
/// [`crate::aws::ATTEMPT_FLOOR`]). A hung provider costs a tick that much at
/// most; one that is slow but answers still gets a started step's calls
/// through, a step a tick.
#[derive(Clone, Copy, Debug)]
pub struct Deadline {
    /// No new step after this.
    pub soft: Instant,
    /// No call after this.
    pub hard: Instant,
}

/// How long after a tick's provider work begins no new step does.
pub const STEP_BUDGET: Duration = Duration::from_secs(2);

/// How long after a tick's provider work begins no call is sent.
pub const CALL_BUDGET: Duration = Duration::from_secs(5);

impl Deadline {
    /// A tick's provider work beginning at `now`.
    pub fn from(now: Instant) -> Deadline {
        Deadline {
            soft: now + STEP_BUDGET,
            hard: now + CALL_BUDGET,
        }
    }
}

/// Providers by kind and region, and this stack's id.
pub struct Fleet {
    /// How long (s) an EC2 client that could not be made is not tried again.
    retry: f64,
    local: Local,
    /// EC2, by region ("" for the AWS chain's own).
    ec2: HashMap<String, Ec2>,
    /// EC2 clients that could not be made, by region: why, and when.
    ec2_failed: HashMap<String, (String, Instant)>,
    stack: Option<String>,
    /// This tick's deadline ([`Fleet::until`]).
    deadline: Option<Deadline>,
}

/// A machine (or an instance) as its provider knows it.
pub struct AtProvider<'a> {
    /// Its provider's kind.
    pub kind: &'a Kind,
    /// The region it was made in (EC2; `None`: the AWS chain's region).
    pub region: Option<&'a str>,
    /// The provider's id for it, if it was ever made.
    pub id: Option<&'a str>,
    /// Its name.
    pub name: &'a str,
}

impl Fleet {
    /// No providers made yet; an EC2 client that can't be made is tried
    /// again after `retry` seconds (`ORCA_POOL_TRY_SECONDS`).
    pub fn new(retry: f64) -> Fleet {
        Fleet {
            retry,
            local: Local::default(),
            ec2: HashMap::new(),
            ec2_failed: HashMap::new(),
            stack: None,
            deadline: None,
        }
    }

    /// The provider of `kind` in `region` (EC2; `None`: the AWS chain's
    /// region). An EC2 region's client is made once; one that can't be made
    /// (no region, say) is tried again after the back-off, saying why
    /// meanwhile.
    pub fn provider(
        &mut self,
        kind: &Kind,
        region: Option<&str>,
    ) -> Result<&mut dyn Provider, String> {
        match kind {
            Kind::Local => Ok(&mut self.local),
            Kind::Ec2 => {
                let key = region.unwrap_or_default().to_string();
                if let Some((why, at)) = self.ec2_failed.get(&key)
                    && at.elapsed().as_secs_f64() < self.retry
                {
                    return Err(why.clone());
                }
                if !self.ec2.contains_key(&key) {
                    match Ec2::new(region) {
                        Ok(mut e) => {
                            e.until(self.deadline.map(|d| d.hard));
                            self.ec2_failed.remove(&key);
                            self.ec2.insert(key.clone(), e);
                        }
                        Err(why) => {
                            self.ec2_failed.insert(key, (why.clone(), Instant::now()));
                            return Err(why);
                        }
                    }
                }
                Ok(self.ec2.get_mut(&key).expect("made above"))
            }
        }
    }

    /// A pass begins: every provider made so far may list once for it.
    pub fn begin_pass(&mut self) {
        self.local.begin_pass();
        for e in self.ec2.values_mut() {
            e.begin_pass();
        }
    }

    /// From now on, no provider call is sent after `deadline`'s hard
    /// limit and none waits long past it ([`Provider::until`]), providers
    /// made later included; `None`: no limit.
    pub fn until(&mut self, deadline: Option<Deadline>) {
        self.deadline = deadline;
        for pr in self.in_use() {
            pr.until(deadline.map(|d| d.hard));
        }
    }

    /// Whether the deadline's soft limit has passed: no new step begins.
    pub fn late(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d.soft)
    }

    /// Every provider made so far: the local one, then EC2's by region.
    pub fn in_use(&mut self) -> Vec<&mut dyn Provider> {
        let mut all: Vec<&mut dyn Provider> = vec![&mut self.local];
        for e in self.ec2.values_mut() {
            all.push(e);
        }
        all
    }

    /// Ends machine `m` at its provider: its login `login` revoked (no
    /// more logins, its sessions ended), then the machine deleted where it
    /// was made, if the provider ever gave it an id. Its login is dropped
    /// after ([`drop_login`]), once nothing holds it.
    pub fn end(&mut self, term: &mut Term, login: &str, m: &AtProvider) -> Result<(), Failed> {
        term.run(|c| logins::revoke(c, login))?;
        let Some(id) = m.id else {
            return Ok(());
        };
        self.provider(m.kind, m.region)
            .and_then(|pr| pr.delete(id, m.name))
            .map_err(Failed::Provider)
    }

    /// The machines of `kind` in `region` labelled with `group` and this
    /// stack (`stack`); Err: the provider can't be made, or can't list them.
    pub fn listed(
        &mut self,
        kind: &Kind,
        region: Option<&str>,
        group: &str,
        stack: &str,
    ) -> Result<Vec<Listed>, String> {
        self.provider(kind, region)?.list(group, stack)
    }

    /// Of the machines `found` at the provider of `kind` in `region`
    /// ([`Fleet::listed`]), deletes those no live row holds (`held` says
    /// which it does, [`walk::strays`]): each stray, with what its delete
    /// came to.
    pub fn delete_strays(
        &mut self,
        kind: &Kind,
        region: Option<&str>,
        found: Vec<Listed>,
        held: impl Fn(&str) -> bool,
    ) -> Vec<(Listed, Result<(), String>)> {
        walk::strays(found, |f| &f.name, held)
            .into_iter()
            .map(|s| {
                let deleted = self
                    .provider(kind, region)
                    .and_then(|pr| pr.delete(&s.id, &s.name));
                (s, deleted)
            })
            .collect()
    }

    /// This stack's id, read (or made) once, on the lead (`term`); said in
    /// the log the first time.
    pub fn stack(&mut self, term: &mut Term) -> Result<String, DutyError> {
        if let Some(id) = &self.stack {
            return Ok(id.clone());
        }
        let id = term
            .run(|c| Ok(crate::machines::stack::stack_id(c)))?
            .map_err(Fault::Other)?;
        log::info!("this stack's id is {id} (it labels this stack's machines)");
        self.stack = Some(id.clone());
        Ok(id)
    }
}

/// Why a fleet's step did not come to its end.
#[derive(Debug)]
pub enum Failed {
    /// The provider's answer (a machine not deleted): revoked, but not
    /// deleted.
    Provider(String),
    /// The database's (or a lost lead): nothing deleted.
    Db(DutyError),
}

impl From<DutyError> for Failed {
    fn from(e: DutyError) -> Failed {
        Failed::Db(e)
    }
}

impl From<Fault> for Failed {
    fn from(f: Fault) -> Failed {
        Failed::Db(f.into())
    }
}

/// The provider kind stored in a row (`orca.instances.provider`): `ec2` or
/// `local`.
pub fn stored_kind(kind: &Kind) -> &'static str {
    match kind {
        Kind::Local => "local",
        Kind::Ec2 => "ec2",
    }
}

/// The provider kind a row's `stored` text names ([`stored_kind`]); anything
/// but `ec2` is local.
pub fn kind_of_stored(stored: &str) -> Kind {
    if stored == "ec2" {
        Kind::Ec2
    } else {
        Kind::Local
    }
}

/// Revokes login `role` and drops it (in this order, on one connection);
/// false if it can't be dropped now (it stays shut out, an orphan dropped on
/// a later pass).
pub fn revoke_and_drop(client: &mut Client, role: &str) -> Result<bool, postgres::Error> {
    logins::revoke(client, role)?;
    logins::drop_role(client, role)
}

/// Drops revoked login `login`, best effort: one that can't be dropped now
/// stays shut out, an orphan dropped on a later pass.
pub fn drop_login(term: &mut Term, login: &str) {
    let _ = term.run(|c| logins::drop_role(c, login));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_kinds_round_trip_through_their_stored_names() {
        for kind in [Kind::Local, Kind::Ec2] {
            assert_eq!(kind_of_stored(stored_kind(&kind)), kind);
        }
        assert_eq!(stored_kind(&Kind::Ec2), "ec2");
        assert_eq!(stored_kind(&Kind::Local), "local");
        assert_eq!(kind_of_stored("anything else"), Kind::Local);
    }

    #[test]
    fn the_local_provider_is_one_and_always_there() {
        let mut f = Fleet::new(60.0);
        assert!(f.provider(&Kind::Local, None).is_ok());
        assert!(f.provider(&Kind::Local, Some("eu-west-1")).is_ok());
        assert_eq!(f.in_use().len(), 1);
        assert!(!f.late());
        let now = Instant::now();
        f.until(Some(Deadline {
            soft: now,
            hard: now + Duration::from_secs(60),
        }));
        assert!(f.late());
        f.until(Some(Deadline::from(Instant::now())));
        assert!(!f.late());
        f.until(None);
        assert!(!f.late());
        let d = Deadline::from(now);
        assert!(d.soft < d.hard && d.soft > now);
    }
}
