//! What machine and instance logins made, removed (migration 21,
//! `orca.login_objects_sweep`): large objects owned by a login or by its
//! group role (`orca_worker`, `orca_instance`: a login may give one to its
//! group, or make one as its group, and `DROP OWNED BY` the login then
//! misses it, while every login of the group may read it), and default
//! privileges set for them. Where the administrator can't revoke the large
//! object functions from `PUBLIC` (RDS), this is the defence: swept before
//! every login is dropped ([`crate::machines::logins::drop_role`], while
//! orca's role can still act as the group through it) and by the leader
//! every `ORCA_LOGIN_XACT_SECONDS` / 2. What each owner had is one
//! `intruder` event a sweep; what orca's role may not remove is said once
//! a process, not at every sweep.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use postgres::Client;

use crate::db::sql;

/// At most this many large objects are unlinked a sweep (each is a
/// subtransaction): a login making them by the thousand holds up no tick;
/// the rest go on the next sweep.
pub const AT_MOST: i32 = 1000;

/// Removes what logins and their groups own (see the module's doc), with
/// an `intruder` event for each owner and outcome; how many things were
/// found.
pub fn sweep(client: &mut Client) -> Result<usize, postgres::Error> {
    let rows = client.query(sql::LOGIN_OBJECTS_SWEEP, &[&AT_MOST])?;
    let mut found: BTreeMap<(String, bool), Vec<String>> = BTreeMap::new();
    for r in &rows {
        found
            .entry((r.get("owner"), r.get("removed")))
            .or_default()
            .push(r.get("what"));
    }
    for ((owner, removed), what) in &mut found {
        if !*removed {
            let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
            what.retain(|w| said.insert((owner.clone(), w.clone())));
            if what.is_empty() {
                continue;
            }
        }
        crate::db::locks::record(client, &say(owner, what, *removed))?;
    }
    Ok(rows.len())
}

/// What this process said orca's role may not remove (owner, what): said
/// once, not at every sweep.
static SAID: Mutex<BTreeSet<(String, String)>> = Mutex::new(BTreeSet::new());

/// At most this many things are named in an event (the rest counted).
const NAMED: usize = 5;

/// The event's words for `what` (at least one thing), owned by role
/// `owner`, removed or not.
pub fn say(owner: &str, what: &[String], removed: bool) -> String {
    let who = match owner {
        "orca_worker" | "orca_instance" => {
            format!("group {owner} (a login gave them to it or made them as it)")
        }
        login => format!("login {login}"),
    };
    let mut things = what
        .iter()
        .take(NAMED)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if what.len() > NAMED {
        things.push_str(&format!(" and {} more", what.len() - NAMED));
    }
    if removed {
        format!("{who} owned {things}: removed (logins may keep nothing)")
    } else {
        format!("{who} owns {things}, which orca's role may not remove: drop them as a superuser")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn things(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("large object {i}")).collect()
    }

    #[test]
    fn an_event_names_the_login_or_its_group_and_what_came_of_it() {
        assert_eq!(
            say("orca_m_s_1", &things(1), true),
            "login orca_m_s_1 owned large object 1: removed (logins may keep nothing)"
        );
        let group = say(
            "orca_worker",
            &["default privileges on tables".into()],
            false,
        );
        assert!(
            group.starts_with("group orca_worker (a login gave them"),
            "{group}"
        );
        assert!(
            group.ends_with("may not remove: drop them as a superuser"),
            "{group}"
        );
    }

    #[test]
    fn a_flood_is_named_by_its_first_five_and_counted() {
        let said = say("orca_m_s_1", &things(1000), true);
        assert!(
            said.contains("large object 5 and 995 more: removed"),
            "{said}"
        );
        assert!(!said.contains("large object 6,"), "{said}");
    }
}
