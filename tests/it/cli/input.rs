//! Bad input at the command line: `orca check`'s problems each with its
//! line and bounded, a file over the size limit or with a NUL refused in one
//! line, a bad schedule or setting named with its range, a missing or
//! wrong argument named, `orca` alone prints its usage; exit 2 throughout.

use super::*;

#[test]
fn check_reports_every_problem_with_its_line() {
    let dir = TempDir::new();
    let path = dir.write(
        "orca.toml",
        "[pipelines.a]\ncommand = \"true\"\nbogus = 1\n\n[pipelines.b]\nschedule = \"99 * * * *\"\n\n[pipelines.c]\ncommand = \"true\"\nretries = -2\nplacement = \"moon\"\n",
    );
    let out = std::process::Command::new(bin())
        .args(["check", "-c", &path])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = text(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    let want = [
        (3, "unknown key 'bogus'"),
        (5, "missing command"),
        (
            6,
            "schedule \"99 * * * *\": minute field: 99 is out of range 0-59",
        ),
        (10, "negative"),
        (11, "bad placement"),
    ];
    for (line, msg) in want {
        let prefix = format!("{path}:{line}: ");
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&prefix) && l.contains(msg)),
            "no '{prefix}...{msg}' in:\n{err}"
        );
    }
    assert_eq!(lines.len(), want.len(), "one line per problem:\n{err}");

    let good = dir.write(
        "good.toml",
        "[pipelines.a]\ncommand = \"true\"\nschedule = \"0 3 * * *\"\n",
    );
    let out = std::process::Command::new(bin())
        .args(["check", "-c", &good])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty() && out.stderr.is_empty());
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let (db, _dir) = setup("[pipelines.a]\ncommand = \"true\"\n");
    for args in [
        vec!["run", "nope"],
        vec!["logs", "999999"],
        vec!["cancel", "999999"],
        vec!["pause", "nope"],
        vec!["runs", "--state", "weird"],
        vec!["runs", "--pipeline", "nope"],
        vec!["runs", "--limit", "x"],
        vec!["frobnicate"],
        vec!["run"],
    ] {
        let out = db.run(&args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "orca {args:?}: {}",
            text(&out.stderr)
        );
        let err = text(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "orca {args:?}: {err}");
        assert!(err.starts_with("orca: "), "orca {args:?}: {err}");
    }
    // Nothing was written by the failed commands.
    assert_eq!(db.one::<i64>("SELECT count(*) FROM orca.runs"), 0);
}

#[test]
fn a_config_file_over_the_size_limit_is_refused_with_one_line() {
    let dir = TempDir::new();
    let big = dir.write(
        "big.toml",
        &format!(
            "# {}\n[pipelines.a]\ncommand = \"true\"\n",
            "x".repeat(1 << 20)
        ),
    );
    for path in ["/dev/zero", big.as_str()] {
        for cmd in [
            vec!["check", "-c", path],
            vec!["register", "-c", path],
            vec!["scheduler", "-c", path],
        ] {
            let out = orca_within(&cmd, 20.0);
            assert_eq!(
                out.status.code(),
                Some(2),
                "orca {cmd:?}: {}",
                text(&out.stderr)
            );
            let err = text(&out.stderr);
            assert_eq!(err.trim_end().lines().count(), 1, "orca {cmd:?}: {err}");
            assert!(
                err.contains(path) && err.contains("1 MiB"),
                "orca {cmd:?}: {err}"
            );
        }
    }
}

#[test]
fn a_file_with_many_problems_is_checked_and_its_problems_shown_bounded() {
    let dir = TempDir::new();
    let mut toml = String::from("[pipelines.a]\ncommand = \"true\"\n");
    for n in 0..20_000 {
        toml.push_str(&format!("bogus{n} = 1\n"));
    }
    let path = dir.write("orca.toml", &toml);
    let out = orca_within(&["check", "-c", &path], 60.0);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines.len(),
        101,
        "the first 100, then a count:\n{}",
        &err[..err.len().min(2000)]
    );
    assert!(
        lines[0].starts_with(&format!("{path}:3: unknown key 'bogus0'")),
        "{}",
        lines[0]
    );
    assert!(
        lines[99].starts_with(&format!("{path}:102: unknown key 'bogus99'")),
        "{}",
        lines[99]
    );
    assert!(lines[100].contains("19900 more"), "{}", lines[100]);
}

#[test]
fn a_nul_is_refused_by_check_and_register_before_the_database_sees_it() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let path = dir.write(
        "orca.toml",
        "[pipelines.a]\ncommand = \"true\"\nenv = { A = \"x\\u0000y\" }\n",
    );
    for cmd in ["check", "register"] {
        let out = db.run(&[cmd, "-c", &path]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "orca {cmd}: {err}");
        assert_eq!(
            err.trim_end(),
            format!("{path}:3: env.A contains a NUL byte"),
            "orca {cmd}"
        );
    }
    assert_eq!(db.one::<i64>("SELECT count(*) FROM orca.pipelines"), 0);
}

#[test]
fn orca_alone_prints_the_whole_usage_and_exits_2() {
    let out = std::process::Command::new(bin()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = text(&out.stderr);
    assert!(err.contains("Usage: orca <COMMAND>"), "{err}");
    assert!(err.contains("Commands:"), "{err}");
    for command in ["migrate", "run", "runs", "logs", "pools", "deploy"] {
        assert!(
            err.lines()
                .any(|l| l.trim_start().starts_with(&format!("{command} "))),
            "no {command} in:\n{err}"
        );
    }
}

#[test]
fn a_bad_schedule_names_its_field_and_range() {
    let dir = TempDir::new();
    let path = dir.write(
        "orca.toml",
        "[pipelines.a]\ncommand = \"true\"\nschedule = \"0 0 * 13 *\"\n\n\
         [pipelines.b]\ncommand = \"true\"\nschedule = \"61 * * * *\"\n\n\
         [pipelines.c]\ncommand = \"true\"\nschedule = \"* * *\"\n\n\
         [pipelines.d]\ncommand = \"true\"\nschedule = \"0 0 * * MON-FRI\"\n",
    );
    let out = std::process::Command::new(bin())
        .args(["check", "-c", &path])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines,
        [
            format!("{path}:3: schedule \"0 0 * 13 *\": month field: 13 is out of range 1-12"),
            format!("{path}:7: schedule \"61 * * * *\": minute field: 61 is out of range 0-59"),
            format!(
                "{path}:11: schedule \"* * *\": 5 or 6 fields are accepted (minute hour \
                 day-of-month month day-of-week, or second first and then those 5); it has 3"
            ),
        ],
        "{err}"
    );
}

#[test]
fn a_missing_argument_is_named() {
    for (args, missing) in [(vec!["run"], "<PIPELINE>"), (vec!["logs"], "<RUN>")] {
        let out = orca_within(&args, 20.0);
        assert_eq!(out.status.code(), Some(2));
        let err = text(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "orca {args:?}: {err}");
        assert!(
            err.starts_with("orca: ") && err.contains(missing),
            "orca {args:?}: {err}"
        );
    }
}

/// clap's hints (a subcommand it takes for a typo, how to pass a value that
/// looks like a flag) stay on the one line an error is said on.
#[test]
fn a_command_line_error_keeps_clap_s_hint_on_its_one_line() {
    for (args, hint) in [
        (vec!["log", "5"], "logs"),
        (vec!["run", "a", "-x"], "-- -x"),
    ] {
        let out = orca_within(&args, 20.0);
        assert_eq!(out.status.code(), Some(2));
        let err = text(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "orca {args:?}: {err}");
        assert!(
            err.starts_with("orca: ") && err.contains("tip: ") && err.contains(hint),
            "orca {args:?}: {err}"
        );
    }
}

/// Issue 26 §4.2: a setting out of its range is refused at start, as `orca
/// check` refuses bad config: one line naming the variable, its value and
/// the range, exit 2, nothing started (never clamped in silence).
#[test]
fn settings_out_of_range_are_refused_at_start() {
    let (db, dir) = setup("[pipelines.p]\ncommand = \"true\"\n");
    let cases = [
        ("ORCA_TICK_SECONDS", "0", "0.05 to 60"),
        ("ORCA_TICK_SECONDS", "61", "0.05 to 60"),
        ("ORCA_STALE_SECONDS", "0", "1 to 86400"),
        ("ORCA_STALE_SECONDS", "0.5", "1 to 86400"),
        ("ORCA_LOGIN_XACT_SECONDS", "0", "1 to 86400"),
        ("ORCA_KILL_GRACE_SECONDS", "-1", "0 to 86400"),
        ("ORCA_POOL_TRY_SECONDS", "0", "0.1 to 86400"),
        ("ORCA_POOL_BOOT_SECONDS", "0", "1 to 86400"),
        ("ORCA_POOL_LOST_SECONDS", "0", "1 to 86400"),
        ("ORCA_POOL_IMAGE_SECONDS", "0", "1 to 86400"),
        ("ORCA_EC2_MAKE_PER_TICK", "0", "1 to 1000"),
    ];
    let mut procs: Vec<(&str, &str, &str, Proc)> = cases
        .iter()
        .map(|&(var, value, range)| {
            let mut c = db.orca(&["scheduler"]);
            c.env(var, value);
            let p = Proc::spawn(c, &dir.path(&format!("{var}-{value}.log")));
            (var, value, range, p)
        })
        .collect();
    for (var, value, range, p) in procs.iter_mut() {
        let status = p.wait_exit(30.0);
        let out = p.output();
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(2),
            "{var}={value}: refused with exit 2:\n{out}"
        );
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 1, "{var}={value}: one line:\n{out}");
        assert!(
            lines[0].contains(&format!("{var}={value}")) && lines[0].contains(*range),
            "{var}={value}: names the variable, its value and {range}:\n{out}"
        );
    }
    // The same bounds hold wherever the setting is read: the one-shot
    // commands that read the stale limit, an idle instance's grace.
    let out = db
        .orca(&["schedulers"])
        .env("ORCA_STALE_SECONDS", "0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("ORCA_STALE_SECONDS=0"));
    let out = db
        .orca(&["pool-next", "orca-i-1", "1", "1", "5"])
        .env("ORCA_POOL_NEXT_GRACE_SECONDS", "0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("ORCA_POOL_NEXT_GRACE_SECONDS=0"),
        "{}",
        text(&out.stderr)
    );
}
