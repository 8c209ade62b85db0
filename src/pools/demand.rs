//! Runs of a pool's pipelines, as the scaler counts them: the demand is what
//! waits beyond the room the pool's workers already have. (Queuing the runs
//! of a removed or lost machine again is part of ending its row:
//! `sql/machine_end.sql`; a worker's claims are `orca.worker_claim`.)

use crate::machines::logins::Machine;

/// Runs the pool's live workers could still take: per machine, its slots
/// less its running runs. Booting machines count: their room is coming.
/// A machine that heard a spot notice (interrupted or draining) counts
/// none: it claims nothing more.
pub fn room(machines: &[&Machine]) -> i64 {
    machines
        .iter()
        .filter(|m| m.notice.is_none())
        .map(|m| (m.slots as i64 - m.running).max(0))
        .sum()
}

/// The demand: `waiting` startable runs (queued long enough; see
/// `sql/pools_view.sql`) less the room the workers have.
pub fn demand(waiting: i64, machines: &[&Machine]) -> i64 {
    (waiting - room(machines)).max(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(slots: i32, running: i64) -> Machine {
        Machine {
            id: 1,
            pool: "p".into(),
            name: "orca-p-1".into(),
            type_: "t".into(),
            location: "l".into(),
            arch: String::new(),
            role: "r".into(),
            provider_id: None,
            slots,
            seen: true,
            silent: 0.0,
            idle: 0.0,
            running,
            age: 0.0,
            busy_at: chrono::Utc::now(),
            ending: false,
            region: None,
            market: "on-demand".into(),
            notice: None,
        }
    }

    #[test]
    fn workers_take_what_they_have_room_for_first() {
        let (a, b) = (machine(4, 1), machine(2, 2));
        assert_eq!(room(&[&a, &b]), 3);
        assert_eq!(demand(5, &[&a, &b]), 2);
        assert_eq!(demand(2, &[&a, &b]), 0);
        assert_eq!(demand(3, &[]), 3);
        // A machine running more than its slots (slots lowered) gives no room.
        let c = machine(1, 3);
        assert_eq!(demand(1, &[&c]), 1);
    }

    #[test]
    fn a_machine_that_heard_a_spot_notice_gives_no_room() {
        let a = machine(4, 1);
        for notice in ["interrupted", "draining"] {
            let b = Machine {
                notice: Some(notice.into()),
                ..machine(4, 0)
            };
            assert_eq!(room(&[&a, &b]), 3, "{notice}");
            assert_eq!(demand(5, &[&a, &b]), 2, "{notice}");
        }
    }
}
