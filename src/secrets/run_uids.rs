//! Runs as uids of their own (`ORCA_RUN_UIDS=FIRST-LAST`), as systemd's
//! `DynamicUser` gives services: each command a supervisor starts (a run's,
//! a sensor's, an EC2 run's driver or service) runs as a uid of the range
//! that no other live command on the host holds, with a gid of the same
//! number and no other group, so that one run can neither read another's
//! `/proc/PID/environ` nor signal it (`kill -9 -1` reaches only its own
//! uid). The keeper takes the uid for the attempt (a lock file per uid,
//! under [`BASE`], shared by every supervisor on the host) and gives it
//! back once nothing of that uid runs (`supervise::uids`).
//!
//! This part holds the setting: its parsing (pure, [`parse_range`]), the
//! order uids are tried in ([`candidates`], pure), and the directory the
//! locks and the runs' homes are in ([`prepare_base`]).

use std::collections::HashSet;
use std::path::Path;

/// The setting.
pub const RUN_UIDS_VAR: &str = "ORCA_RUN_UIDS";

/// The highest uid a range may hold (`2^31 - 2`: `-1` and its neighbours
/// mean "no uid" to some system calls and tools).
pub const MAX_UID: u32 = 2_147_483_646;

/// The most uids a range may hold (runs at once on one host).
pub const MAX_UIDS: u32 = 65_536;

/// Where every supervisor of the host keeps a lock file per uid
/// (`<uid>.lock`, root's, mode 0600) and each run's home (`<uid>/`, the
/// run's uid's, 0700): root's own directory, mode 0711. A fixed path, not
/// the temp dir, so that supervisors started with different `TMPDIR`s
/// still share the locks.
pub const BASE: &str = "/var/tmp/orca-runs";

/// A range of uids runs take theirs from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UidRange {
    /// Its first uid.
    pub first: u32,
    /// Its last uid (included).
    pub last: u32,
}

/// Why a value of [`RUN_UIDS_VAR`] is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeError {
    /// Not `FIRST-LAST`, two decimal numbers.
    NotARange,
    /// It holds uid 0 (root).
    Root,
    /// Its last uid is below its first.
    Backwards,
    /// A uid over [`MAX_UID`].
    TooHigh,
    /// More than [`MAX_UIDS`] uids.
    TooMany,
}

impl std::fmt::Display for RangeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RangeError::NotARange => "not a range FIRST-LAST of uids",
            RangeError::Root => "a range of uids can't hold 0 (root)",
            RangeError::Backwards => "its last uid is below its first",
            RangeError::TooHigh => "uids go up to 2147483646",
            RangeError::TooMany => "at most 65536 uids",
        })
    }
}

/// `FIRST-LAST` as a range: decimal uids, `1 <= FIRST <= LAST <=`
/// [`MAX_UID`], at most [`MAX_UIDS`] of them.
pub fn parse_range(text: &str) -> Result<UidRange, RangeError> {
    let (first, last) = text.trim().split_once('-').ok_or(RangeError::NotARange)?;
    let number = |s: &str| {
        if s.is_empty() || s.len() > 10 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(RangeError::NotARange);
        }
        let n: u64 = s.parse().map_err(|_| RangeError::NotARange)?;
        u32::try_from(n)
            .ok()
            .filter(|n| *n <= MAX_UID)
            .ok_or(RangeError::TooHigh)
    };
    let (first, last) = (number(first)?, number(last)?);
    if first == 0 {
        return Err(RangeError::Root);
    }
    if last < first {
        return Err(RangeError::Backwards);
    }
    if last - first >= MAX_UIDS {
        return Err(RangeError::TooMany);
    }
    Ok(UidRange { first, last })
}

/// The uids of `range` a command may be given, lowest first (so a uid
/// given back is the next taken): not one a live process has (`in_use`),
/// nor one that names a user or group of the host (`named`). The keeper
/// takes the first whose lock it gets.
pub fn candidates<'a>(
    range: UidRange,
    in_use: &'a HashSet<u32>,
    named: impl Fn(u32) -> bool + 'a,
) -> impl Iterator<Item = u32> + 'a {
    (range.first..=range.last).filter(move |u| !in_use.contains(u) && !named(*u))
}

/// The files that give users subordinate uids and gids (rootless
/// containers' processes and files have them).
pub const SUBORDINATE_FILES: [&str; 2] = ["/etc/subuid", "/etc/subgid"];

/// The first entry of a `/etc/subuid` (or `/etc/subgid`) text (lines
/// `NAME:FIRST:COUNT`) whose ids overlap `range`: its name and its first
/// and last id. Lines that are not such an entry are skipped.
pub fn subordinate_overlap(range: UidRange, text: &str) -> Option<(String, u64, u64)> {
    text.lines().find_map(|line| {
        let mut f = line.trim().splitn(3, ':');
        let (name, first, count) = (f.next()?, f.next()?, f.next()?);
        let first: u64 = first.trim().parse().ok()?;
        let count: u64 = count.trim().parse().ok()?;
        let last = first.checked_add(count.checked_sub(1)?)?;
        (first <= u64::from(range.last) && u64::from(range.first) <= last)
            .then(|| (name.chars().take(64).collect(), first, last))
    })
}

static RUN_UIDS: std::sync::OnceLock<Option<UidRange>> = std::sync::OnceLock::new();

/// Sets the range runs take their uids from (`None`: off); the first call
/// wins.
pub(super) fn set(range: Option<UidRange>) {
    let _ = RUN_UIDS.set(range);
}

/// The range runs take their uids from, when `ORCA_RUN_UIDS` is set (and
/// this process starts runs).
pub fn run_uids() -> Option<UidRange> {
    RUN_UIDS.get().copied().flatten()
}

/// `ORCA_RUN_UIDS`, read: `None` when unset or empty; an error (bad input,
/// one line) for a value [`parse_range`] refuses, one that overlaps a
/// user's subordinate ids ([`SUBORDINATE_FILES`]: a run would share its
/// uid with that user's containers, and the per-uid kill end them), when
/// this process isn't root, or when [`BASE`] can't be made root's own.
pub fn run_uids_from_env() -> Result<Option<UidRange>, String> {
    let Some(value) = std::env::var_os(RUN_UIDS_VAR) else {
        return Ok(None);
    };
    let value = value.to_string_lossy();
    if value.trim().is_empty() {
        return Ok(None);
    }
    let shown: String = value.chars().take(64).collect();
    let range = parse_range(&value).map_err(|e| {
        format!("{RUN_UIDS_VAR}={shown}: {e} (FIRST-LAST, 1-{MAX_UID}, at most {MAX_UIDS} uids)")
    })?;
    for file in SUBORDINATE_FILES {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        if let Some((name, first, last)) = subordinate_overlap(range, &text) {
            return Err(format!(
                "{RUN_UIDS_VAR}={shown}: overlaps {name}'s subordinate ids in {file} ({first}-{last}): \
                 their containers have those uids; pick a range no one's"
            ));
        }
    }
    // SAFETY: geteuid(2) can't fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err(format!(
            "{RUN_UIDS_VAR}={shown}: orca must run as root to start runs as uids of their own"
        ));
    }
    prepare_base(Path::new(BASE)).map_err(|e| format!("{RUN_UIDS_VAR}: {BASE}: {e}"))?;
    Ok(Some(range))
}

/// Makes `dir` root's own directory, mode 0711 (a run reaches its own home
/// in it, lists nothing): made if missing; one that is not a directory (a
/// symlink, say), not root's, or writable by others is refused.
pub fn prepare_base(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    match std::fs::DirBuilder::new().mode(0o711).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e.to_string()),
    }
    let m = std::fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
    if !m.is_dir() || m.uid() != 0 {
        return Err("not a directory of root's own".into());
    }
    if m.mode() & 0o022 != 0 {
        return Err("writable by others than root".into());
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711)).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_is_two_uids_bounded_and_in_order() {
        assert_eq!(
            parse_range("61184-65519"),
            Ok(UidRange {
                first: 61184,
                last: 65519
            })
        );
        assert_eq!(parse_range(" 7-7 "), Ok(UidRange { first: 7, last: 7 }));
        for (bad, why) in [
            ("", RangeError::NotARange),
            ("abc", RangeError::NotARange),
            ("5", RangeError::NotARange),
            ("5-", RangeError::NotARange),
            ("-5-10", RangeError::NotARange),
            ("+5-10", RangeError::NotARange),
            ("5 - 10", RangeError::NotARange),
            ("1-99999999999999", RangeError::NotARange),
            ("0-10", RangeError::Root),
            ("10-5", RangeError::Backwards),
            ("1-4294967295", RangeError::TooHigh),
            ("2147483647-2147483647", RangeError::TooHigh),
            ("100000-200000", RangeError::TooMany),
        ] {
            assert_eq!(parse_range(bad), Err(why), "{bad:?}");
        }
        // The bounds themselves.
        assert!(parse_range("1-65536").is_ok());
        assert_eq!(parse_range("1-65537"), Err(RangeError::TooMany));
        assert!(parse_range("2147483646-2147483646").is_ok());
    }

    #[test]
    fn a_range_overlapping_a_user_s_subordinate_ids_is_found() {
        let range = UidRange {
            first: 200_000,
            last: 265_535,
        };
        // Ubuntu's useradd: 65536 ids a user, from 100000.
        let text = "ubuntu:100000:65536\nalice:165536:65536\n";
        assert_eq!(
            subordinate_overlap(range, text),
            Some(("alice".into(), 165_536, 231_071))
        );
        assert_eq!(subordinate_overlap(range, "ubuntu:100000:65536\n"), None);
        // The edges: the last id of an entry, the first of the range.
        assert!(subordinate_overlap(range, "a:199999:2\n").is_some());
        assert_eq!(subordinate_overlap(range, "a:199999:1\n"), None);
        assert!(subordinate_overlap(range, "a:265535:1\n").is_some());
        assert_eq!(subordinate_overlap(range, "a:265536:9\n"), None);
        // What is no entry is skipped.
        for junk in ["", "# c\n", "a:b:c\n", "a:1\n", "a:200000:0\n", "a:-1:5\n"] {
            assert_eq!(subordinate_overlap(range, junk), None, "{junk:?}");
        }
    }

    #[test]
    fn the_lowest_uid_no_process_and_no_user_has_is_tried_first() {
        let range = UidRange {
            first: 100,
            last: 105,
        };
        let in_use: HashSet<u32> = [100, 102].into();
        let named = |u: u32| u == 101;
        let order: Vec<u32> = candidates(range, &in_use, named).collect();
        assert_eq!(order, [103, 104, 105]);
        // Given back (no process has it any more): the next taken.
        let in_use: HashSet<u32> = [102].into();
        assert_eq!(candidates(range, &in_use, named).next(), Some(100));
        // All taken: none.
        let all: HashSet<u32> = (100..=105).collect();
        assert_eq!(candidates(range, &all, |_| false).next(), None);
    }
}
