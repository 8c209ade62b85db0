//! Decisions every kind of machine shares, pure (a pool's machines, an EC2
//! run's instances): the locations tried in turn by their answers
//! ([`try_locations`]), and the provider's machines no live row holds
//! ([`strays`]).

use crate::providers::MakeError;

/// What trying the locations in turn came to.
#[derive(Debug, PartialEq)]
pub struct Tried<T> {
    /// The location that made it, and what it made.
    pub made: Option<(String, T)>,
    /// The locations that had no room, each as `location: why`, in order.
    pub full: Vec<String>,
    /// A failure other than capacity, which stopped the walk.
    pub failed: Option<String>,
}

impl<T> Tried<T> {
    /// Why nothing was made: every location's answer, `; `-separated.
    pub fn why(&self) -> String {
        let mut all = self.full.clone();
        all.extend(self.failed.clone());
        all.join("; ")
    }
}

/// Tries `locations` in turn, asking `make` for each (with the location
/// tried after it, if any): the first that makes it ends the walk; one with
/// no capacity passes to the next; any other failure stops it, no other
/// location tried.
pub fn try_locations<T>(
    locations: &[String],
    mut make: impl FnMut(&str, Option<&str>) -> Result<T, MakeError>,
) -> Tried<T> {
    let mut tried = Tried {
        made: None,
        full: Vec::new(),
        failed: None,
    };
    for (n, location) in locations.iter().enumerate() {
        let next = locations.get(n + 1).map(String::as_str);
        match make(location, next) {
            Ok(m) => {
                tried.made = Some((location.clone(), m));
                break;
            }
            Err(MakeError::NoCapacity(why)) => tried.full.push(format!("{location}: {why}")),
            Err(MakeError::Failed(why)) => {
                tried.failed = Some(why);
                break;
            }
        }
    }
    tried
}

/// Of the machines a provider `found` with a group's and this stack's
/// labels, those no live row holds (`held` says which it does): strays.
pub fn strays<T>(found: Vec<T>, name: impl Fn(&T) -> &str, held: impl Fn(&str) -> bool) -> Vec<T> {
    found.into_iter().filter(|f| !held(name(f))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn locations() -> Vec<String> {
        vec!["rack-a".into(), "rack-b".into(), "rack-c".into()]
    }

    #[test]
    fn locations_are_tried_in_turn_until_one_has_room() {
        let mut asked = Vec::new();
        let tried = try_locations(&locations(), |l, next| {
            asked.push((l.to_string(), next.map(str::to_string)));
            match l {
                "rack-b" => Ok("i-2"),
                _ => Err(MakeError::NoCapacity(format!("{l} is full"))),
            }
        });
        assert_eq!(
            asked,
            [
                ("rack-a".into(), Some("rack-b".into())),
                ("rack-b".into(), Some("rack-c".into()))
            ]
        );
        assert_eq!(tried.made, Some(("rack-b".into(), "i-2")));
        assert_eq!(tried.full, ["rack-a: rack-a is full"]);
        assert_eq!(tried.failed, None);
    }

    #[test]
    fn with_no_location_having_room_every_answer_is_kept() {
        let tried = try_locations(&locations(), |_, _| {
            Err::<(), _>(MakeError::NoCapacity("full".into()))
        });
        assert_eq!(tried.made, None);
        assert_eq!(tried.full.len(), 3);
        assert_eq!(tried.why(), "rack-a: full; rack-b: full; rack-c: full");
    }

    #[test]
    fn a_failure_other_than_capacity_stops_the_walk() {
        let mut asked = 0;
        let tried = try_locations(&locations(), |l, _| {
            asked += 1;
            Err::<(), _>(match l {
                "rack-a" => MakeError::NoCapacity("full".into()),
                _ => MakeError::Failed("UnauthorizedOperation".into()),
            })
        });
        assert_eq!(asked, 2);
        assert_eq!(tried.failed.as_deref(), Some("UnauthorizedOperation"));
        assert_eq!(tried.why(), "rack-a: full; UnauthorizedOperation");
    }

    #[test]
    fn a_machine_no_live_row_holds_is_a_stray() {
        let found = vec!["orca-builders-1", "orca-builders-2", "orca-builders-3"];
        let live = ["orca-builders-2"];
        let strays = strays(found, |f| f, |n| live.contains(&n));
        assert_eq!(strays, ["orca-builders-1", "orca-builders-3"]);
    }
}
