//! A leading tick's duties and their order, pure: what a tick does once it
//! leads ([`plan`], from what it knows as it begins them), and whether EC2
//! runs' upkeep is looked at ([`ec2_registered`], the gate's first half;
//! `warm_pool::decide::upkeep` the rest). `Scheduler::tick` does the plan
//! in order.
//!
//! Before them, the file to register (`-c`, overlap on) is registered and
//! the pipelines are read, with the database's clock. The order, and why:
//! 1. logins stuck in a transaction ended, and what logins made swept
//!    (each every `ORCA_LOGIN_XACT_SECONDS` / 2), before the duties whose
//!    statements they could hold up;
//! 2. schedules fired (only with the database's clock, read with the
//!    pipelines: none without a pipeline), then sensors: what they queue is
//!    started by the same tick;
//! 3. local runs started, before any provider work can hold the tick up;
//! 4. provider work, within one deadline a tick: the scaler's pass (when
//!    due) first, then EC2 runs' upkeep (while it is due);
//! 5. the sweep of stale runs, after the slow work, since it judges by
//!    the time the tick took (one that stalled sweeps nothing), and last
//!    pruning, within what is left of the tick.

use crate::config::Placement;
use crate::scheduler::views::Views;

/// One of a leading tick's duties.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Duty {
    /// End machine and instance logins stuck in a transaction.
    StuckLogins,
    /// Sweep what logins made (`machines::objects`).
    Objects,
    /// Fire due schedules.
    Fire,
    /// Run sensors.
    Sense,
    /// Start queued local runs.
    StartLocal,
    /// The pool scaler's pass.
    Scale,
    /// EC2 runs: instances for runs started before, new runs, what is over.
    Ec2,
    /// Sweep stale local runs.
    Sweep,
    /// Prune history past the keep.
    Prune,
}

/// What a leading tick knows as it plans its duties.
#[derive(Clone, Copy, Debug, Default)]
pub struct Facts {
    /// Stuck logins are due to be looked for.
    pub stuck_logins: bool,
    /// What logins made is due to be swept.
    pub objects: bool,
    /// The database's clock was read (there is a pipeline).
    pub clock: bool,
    /// A scaler pass is due.
    pub scale: bool,
}

/// A leading tick's duties, in order (see the module's doc); the sensors,
/// the starts, EC2 runs (gated again by their upkeep), the sweep and the
/// prune every tick (each asks its own when).
pub fn plan(f: Facts) -> Vec<Duty> {
    let mut duties = Vec::with_capacity(9);
    let mut add = |d, due: bool| {
        if due {
            duties.push(d)
        }
    };
    add(Duty::StuckLogins, f.stuck_logins);
    add(Duty::Objects, f.objects);
    add(Duty::Fire, f.clock);
    add(Duty::Sense, true);
    add(Duty::StartLocal, true);
    add(Duty::Scale, f.scale);
    add(Duty::Ec2, true);
    add(Duty::Sweep, true);
    add(Duty::Prune, true);
    duties
}

/// Whether an EC2 pipeline is registered among `pipelines`: EC2 runs'
/// upkeep runs every tick then (after the last is retired, only while an
/// EC2 run or an instance row lives: `warm_pool::decide::upkeep`).
pub(super) fn ec2_registered(pipelines: &Views) -> bool {
    pipelines.values().any(|v| v.p.placement == Placement::Ec2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Pipeline;
    use crate::scheduler::views::View;
    use std::sync::Arc;

    #[test]
    fn a_leading_tick_does_its_duties_in_their_order() {
        let all = Facts {
            stuck_logins: true,
            objects: true,
            clock: true,
            scale: true,
        };
        assert_eq!(
            plan(all),
            [
                Duty::StuckLogins,
                Duty::Objects,
                Duty::Fire,
                Duty::Sense,
                Duty::StartLocal,
                Duty::Scale,
                Duty::Ec2,
                Duty::Sweep,
                Duty::Prune
            ]
        );
    }

    #[test]
    fn what_is_not_due_is_left_out_and_the_rest_keep_their_order() {
        assert_eq!(
            plan(Facts::default()),
            [
                Duty::Sense,
                Duty::StartLocal,
                Duty::Ec2,
                Duty::Sweep,
                Duty::Prune
            ]
        );
        let no_clock = plan(Facts {
            scale: true,
            ..Facts::default()
        });
        assert!(!no_clock.contains(&Duty::Fire), "no clock, nothing fired");
        let at = |d| no_clock.iter().position(|x| *x == d).unwrap();
        assert!(at(Duty::StartLocal) < at(Duty::Scale), "local starts first");
        assert!(at(Duty::Scale) < at(Duty::Ec2), "the pass first");
        assert!(at(Duty::Ec2) < at(Duty::Sweep));
    }

    fn views(placements: &[(&str, Placement)]) -> Views {
        placements
            .iter()
            .map(|(name, placement)| {
                let mut p: Pipeline = serde_json::from_value(serde_json::json!({
                    "name": name,
                    "command": "true",
                    "placement": "Local",
                    "max_runs": 1,
                    "schedule": null,
                    "retries": 0,
                    "retry_delay": 0.0,
                    "timeout": null,
                    "env": {},
                    "alert": null,
                    "sensor": null,
                    "sensor_every": 5.0,
                    "ec2": null
                }))
                .unwrap();
                p.placement = placement.clone();
                let v = View {
                    p: Arc::new(p),
                    next_fire: None,
                    paused: false,
                };
                (name.to_string(), v)
            })
            .collect()
    }

    #[test]
    fn ec2_upkeep_is_gated_on_an_ec2_pipeline_registered() {
        assert!(!ec2_registered(&views(&[])));
        assert!(!ec2_registered(&views(&[
            ("a", Placement::Local),
            ("b", Placement::Worker("gpu".into()))
        ])));
        assert!(ec2_registered(&views(&[
            ("a", Placement::Local),
            ("e", Placement::Ec2)
        ])));
    }
}
