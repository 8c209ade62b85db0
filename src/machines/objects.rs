//! What machine and instance logins made, removed (migration 22,
//! `orca.login_objects_sweep`): large objects owned by a login or by its
//! group role (`orca_worker`, `orca_instance`: a login may give one to its
//! group, or make one as its group, and `DROP OWNED BY` the login then
//! misses it, while every login of the group may read it), and default
//! privileges set for them. Where the administrator can't revoke the large
//! object functions from `PUBLIC` (RDS), this is the defence: swept before
//! every login is dropped ([`crate::machines::logins::drop_role`], while
//! orca's role can still act as the group through it) and by the leader
//! every `ORCA_LOGIN_XACT_SECONDS` / 2. Each thing found is an `intruder`
//! event.

use postgres::Client;

use crate::db::sql;

/// Removes what logins and their groups own (see the module's doc), with
/// an `intruder` event for each; how many were found.
pub fn sweep(client: &mut Client) -> Result<usize, postgres::Error> {
    let rows = client.query(sql::LOGIN_OBJECTS_SWEEP, &[])?;
    for r in &rows {
        let why = say(r.get("owner"), r.get("what"), r.get("removed"));
        crate::db::locks::record(client, &why)?;
    }
    Ok(rows.len())
}

/// The event's words for `what`, owned by role `owner`, removed or not.
pub fn say(owner: &str, what: &str, removed: bool) -> String {
    let who = match owner {
        "orca_worker" | "orca_instance" => {
            format!("group {owner} (a login gave it or made it as its group)")
        }
        login => format!("login {login}"),
    };
    if removed {
        format!("{who} owned {what}: removed (logins may keep nothing)")
    } else {
        format!("{who} owns {what}, which orca's role may not remove: drop it as a superuser")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_names_the_login_or_its_group_and_what_came_of_it() {
        assert_eq!(
            say("orca_m_s_1", "large object 42", true),
            "login orca_m_s_1 owned large object 42: removed (logins may keep nothing)"
        );
        let group = say("orca_worker", "default privileges on tables", false);
        assert!(
            group.starts_with("group orca_worker (a login gave it"),
            "{group}"
        );
        assert!(
            group.ends_with("may not remove: drop it as a superuser"),
            "{group}"
        );
    }
}
