//! The scaler's log lines about the walk, its machines made and removed:
//! what an operator reads in the scheduler's log. They name pools, types,
//! locations and machines, and say what a provider answered; never a token
//! (nothing here is given one).

use crate::config::PoolType;
use crate::pools::decide::Walk;

/// Seconds as a log line says them: whole (those begun are not counted,
/// so 9.9 s waited is not said as a wait of 10 s done), with a unit.
fn secs(s: f64) -> String {
    format!("{:.0} s", s.max(0.0).floor())
}

/// The log line for location `location` without room for type `ty` (the
/// provider said `why`); `next` is the location tried next, if any.
pub fn say_no_room(pool: &str, ty: &str, location: &str, why: &str, next: Option<&str>) -> String {
    let then = match next {
        Some(n) => format!("trying {n}"),
        None => "no location left".into(),
    };
    format!("pool {pool}: no room for {ty} in {location}: {why}; {then}")
}

/// The log line for an attempt that found type `ty` in no location, having
/// tried it for `waited` seconds, and what the walk does next.
pub fn say_unavailable(pool: &str, ty: &PoolType, waited: f64, walk: &Walk) -> String {
    let name = ty.called();
    let head = format!("pool {pool}: {name} unavailable in every location");
    match walk {
        Walk::Again => format!("{head}; it is the last type: trying it again on the next attempt"),
        Walk::Keep => format!(
            "{head}; waited {} of its {} wait; trying it again",
            secs(waited),
            secs(ty.wait)
        ),
        Walk::Next(to) => format!(
            "{head}; waited {} of its {} wait; moving to {}",
            secs(waited),
            secs(ty.wait),
            to.called()
        ),
    }
}

/// The log line for machine `name` made as type `ty` in `location`.
pub fn say_made(pool: &str, name: &str, ty: &str, location: &str) -> String {
    format!("pool {pool}: made machine {name} ({ty} in {location})")
}

/// The log line for machine `name` whose removal begins, for `why`.
pub fn say_removing(pool: &str, name: &str, why: &str) -> String {
    format!("pool {pool}: removing machine {name}: {why}")
}

/// The log line for machine `name` removed, `requeued` of its runs queued
/// again.
pub fn say_removed(pool: &str, name: &str, requeued: usize) -> String {
    match requeued {
        0 => format!("pool {pool}: machine {name} removed"),
        n => format!("pool {pool}: machine {name} removed; {n} of its runs queued again"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ty(name: &str, wait: f64) -> PoolType {
        PoolType::on_demand(name, wait)
    }

    #[test]
    fn the_walk_is_said_as_an_operator_reads_it() {
        assert_eq!(
            say_no_room(
                "builders",
                "big",
                "rack-a",
                "rack-a is full (0 of 0)",
                Some("rack-b")
            ),
            "pool builders: no room for big in rack-a: rack-a is full (0 of 0); trying rack-b"
        );
        assert_eq!(
            say_no_room(
                "builders",
                "big",
                "rack-b",
                "big@rack-b is full (0 of 0)",
                None
            ),
            "pool builders: no room for big in rack-b: big@rack-b is full (0 of 0); no location left"
        );
        let big = ty("big", 10.0);
        assert_eq!(
            say_unavailable("builders", &big, 9.97, &Walk::Keep),
            "pool builders: big unavailable in every location; waited 9 s of its 10 s wait; trying it again"
        );
        assert_eq!(
            say_unavailable("builders", &big, 12.0, &Walk::Next(&ty("small", 0.0))),
            "pool builders: big unavailable in every location; waited 12 s of its 10 s wait; moving to small"
        );
        assert_eq!(
            say_unavailable("builders", &ty("small", 0.0), 0.0, &Walk::Again),
            "pool builders: small unavailable in every location; it is the last type: trying it again on the next attempt"
        );
    }

    #[test]
    fn machines_made_and_removed_are_said_with_their_why() {
        assert_eq!(
            say_made("builders", "orca-builders-5", "small", "rack-b"),
            "pool builders: made machine orca-builders-5 (small in rack-b)"
        );
        assert_eq!(
            say_removing(
                "builders",
                "orca-builders-5",
                "idle for 21 s with no demand (idle_seconds 20)"
            ),
            "pool builders: removing machine orca-builders-5: idle for 21 s with no demand (idle_seconds 20)"
        );
        assert_eq!(
            say_removed("builders", "orca-builders-5", 0),
            "pool builders: machine orca-builders-5 removed"
        );
        assert_eq!(
            say_removed("builders", "orca-builders-5", 2),
            "pool builders: machine orca-builders-5 removed; 2 of its runs queued again"
        );
    }
}
