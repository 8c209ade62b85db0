//! A pass's make for a pool: the type the walk is on (a type no AMI fits,
//! or that the worker image has no variant for, skipped, saying so), made through the fleet
//! ([`Fleet::make`]), and what came of it said: the machine made, a
//! refusal (an event once per change), no room in any location (the walk
//! moves on, [`TypeWalk::no_capacity`]).

use std::collections::HashMap;
use std::time::Instant;

use crate::config::Pool;
use crate::config::arch::Fit;
use crate::lead::{DutyError, Term};
use crate::machines::fleet::Fleet;
use crate::machines::make::Unmade;
use crate::pools::decide::{self, PoolView, TypeWalk, say_no_capacity};
use crate::pools::event::event;
use crate::pools::order::PoolOrder;
use crate::pools::say::{say_made, say_unavailable};
use crate::providers::Provider;
use crate::settings::PoolTiming;

/// What a pool's attempts to make a machine keep between passes: the
/// worker images' architectures (read again after
/// `ORCA_POOL_IMAGE_SECONDS`), and each pool's last refusal. Owned by the
/// scaler, which lends its fleet and the lead to each attempt.
#[derive(Default)]
pub(super) struct Attempts {
    /// Each worker image's architectures as last read, and when.
    images: HashMap<String, (Result<Vec<String>, String>, Instant)>,
    /// The provider's refusal each pool's last attempt to make a machine
    /// came to, as its `machine not made` event said it
    /// ([`decide::refusal_is_news`]); gone once an attempt comes to
    /// anything else.
    refused: HashMap<String, String>,
}

/// The provider of pool `p`'s machines (see [`Fleet::provider`]).
fn provider<'f>(fleet: &'f mut Fleet, p: &Pool) -> Result<&'f mut dyn Provider, String> {
    fleet.provider(&p.machines.provider, p.machines.region.as_deref())
}

impl Attempts {
    /// The architectures of `image`, read again once they are older than
    /// `ORCA_POOL_IMAGE_SECONDS` (a tag can be pushed again).
    fn arches(&mut self, image: &str, timing: &PoolTiming) -> Result<Vec<String>, String> {
        // Read again after ORCA_POOL_IMAGE_SECONDS; a read that failed, after
        // the try interval.
        let fresh = self.images.get(image).is_some_and(|(read, at)| {
            let limit = if read.is_ok() {
                timing.image
            } else {
                timing.try_every
            };
            at.elapsed().as_secs_f64() < limit
        });
        if !fresh {
            let read = crate::pools::registry::architectures(image);
            if let Err(e) = &read {
                log::warn!("image {image}: can't read its architectures: {e}");
            }
            self.images
                .insert(image.to_string(), (read, Instant::now()));
        }
        self.images[image].0.clone()
    }

    /// A refusal of the provider's for pool `pool` (auth, a bad AMI, a
    /// quota): an event once per change of it, not per attempt. Not this
    /// tick's time being spent (no call sent): that is no answer of the
    /// provider's (a refusal answered just before is said next pass).
    fn refused(
        &mut self,
        fleet: &Fleet,
        term: &mut Term,
        pool: &str,
        why: &str,
    ) -> Result<(), DutyError> {
        let said = self.refused.get(pool).map(String::as_str);
        if !fleet.late() && decide::refusal_is_news(said, why) {
            event(term, "machine not made", &format!("pool {pool}: {why}"))?;
            self.refused.insert(pool.to_string(), why.to_string());
        }
        Ok(())
    }

    /// One attempt to make a machine for pool `v` (through `fleet`, on the
    /// lead `term`), the type walk `walk` deciding which type; returns what
    /// it came to.
    pub(super) fn attempt(
        &mut self,
        fleet: &mut Fleet,
        term: &mut Term,
        v: &PoolView,
        walk: &mut TypeWalk,
        timing: &PoolTiming,
    ) -> Result<String, DutyError> {
        let p = &v.pool;
        let arches = p.image.as_deref().map(|i| (i, self.arches(i, timing)));
        let mut notes = Vec::new();
        // Each type is launched from the AMI of its architecture; a type no
        // AMI fits, or (with an image) whose architecture the image has no
        // variant for, is skipped in this attempt, saying why.
        let (ty, fit) = loop {
            let ty = p.types[walk.ty].clone();
            let fit = match provider(fleet, p).and_then(|pr| pr.fit(&ty.name, &p.machines)) {
                Ok(fit) => fit,
                Err(e) => {
                    // Not an answer about the type: nothing skipped, the
                    // next pass asks again.
                    let why = format!("type {}: its architectures can't be told: {e}", ty.name);
                    self.refused(fleet, term, &p.name, &why)?;
                    notes.push(why);
                    return Ok(notes.join("; "));
                }
            };
            let why = match (fit, &arches) {
                (Fit::Skip(why), _) => why,
                (fit @ Fit::Launch { .. }, None) => break (ty, fit),
                (fit @ Fit::Launch { .. }, Some((image, Err(e)))) => {
                    notes.push(format!(
                        "image {image}'s architectures can't be read ({e}): no type skipped for it"
                    ));
                    break (ty, fit);
                }
                (Fit::Launch { ami, arch }, Some((image, Ok(have)))) => {
                    let oci = crate::providers::oci_arch(&arch);
                    if have.iter().any(|h| h == oci) {
                        break (ty, Fit::Launch { ami, arch });
                    }
                    format!(
                        "type {} skipped: image {image} has no {oci} variant (it has {})",
                        ty.name,
                        have.join(", ")
                    )
                }
            };
            event(term, "type skipped", &format!("pool {}: {why}", p.name))?;
            log::warn!("pool {}: {why}", p.name);
            notes.push(why);
            if !walk.skip(p.types.len()) {
                return Ok(format!("no type fits: {}", notes.join("; ")));
            }
        };
        let Fit::Launch { arch, .. } = fit else {
            unreachable!("only a fit leaves the walk");
        };
        walk.tried();
        let order = PoolOrder {
            pool: p,
            type_: &ty.name,
            market: ty.market,
            max_price: ty.max_price.as_deref(),
            arch: &arch,
        };
        let made = match fleet.make(term, &order) {
            Ok(made) => made,
            Err(Unmade::Db(e)) => return Err(e),
            Err(Unmade::NotMade { name, tried }) => {
                if let Some(why) = tried.failed {
                    log::warn!("pool {}: machine {name} not made: {why}", p.name);
                    self.refused(fleet, term, &p.name, &why)?;
                    notes.push(format!("{name} not made: {why}"));
                    return Ok(notes.join("; "));
                }
                self.refused.remove(&p.name);
                let waited = walk.waited.unwrap_or(0.0);
                let next_walk = walk.no_capacity(&p.types);
                let next = say_no_capacity(&ty, waited, &next_walk, &tried.full);
                log::info!("{}", say_unavailable(&p.name, &ty, waited, &next_walk));
                // The event says what the walk does next, as the status does.
                event(term, "no capacity", &format!("pool {}: {next}", p.name))?;
                notes.push(next);
                return Ok(notes.join("; "));
            }
        };
        self.refused.remove(&p.name);
        let (name, location) = (&made.name, &made.location);
        log::info!("{}", say_made(&p.name, name, &ty.called(), location));
        walk.made();
        notes.push(format!(
            "made {name} (type {}, location {location})",
            ty.called()
        ));
        Ok(notes.join("; "))
    }
}
