//! The shipped launch path, as `docs/setup.md` tells an operator to use
//! it: `make install`, `/etc/orca/env` written as the page shows it, and
//! each of the two launchers (the systemd unit, the user-data loop)
//! starting a scheduler from that one file.

use crate::harness::*;
use crate::setup::{blocks, repo_file};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The PREFIX the tests install under.
const PREFIX: &str = "/opt/orca";

/// `make install DESTDIR=<dir>/root PREFIX=/opt/orca` of the tests' binary:
/// the image root.
fn install(dir: &TempDir) -> PathBuf {
    let dest = dir.path("root");
    let out = Command::new("make")
        .args([
            "-s",
            "install",
            &format!("BIN={}", bin()),
            &format!("DESTDIR={}", dest.display()),
            &format!("PREFIX={PREFIX}"),
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("make");
    assert!(out.status.success(), "make install: {}", text(&out.stderr));
    dest
}

/// `docs/setup.md`'s `/etc/orca/env` (the `sh` block that starts with
/// that comment), its database URL replaced by `url`: the rest as written.
fn documented_env(url: &str) -> String {
    let page = repo_file("docs/setup.md");
    let block = blocks(&page, "sh")
        .into_iter()
        .find(|b| b.starts_with("# /etc/orca/env\n"))
        .expect("docs/setup.md shows /etc/orca/env");
    let mut replaced = 0;
    let env: String = block
        .lines()
        .map(|l| {
            if l.starts_with("ORCA_DATABASE_URL=") {
                replaced += 1;
                format!("ORCA_DATABASE_URL='{url}'\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    assert_eq!(replaced, 1, "one ORCA_DATABASE_URL line: {block}");
    env
}

/// The value of `NAME=` in an env file as the page writes it (unquoted).
fn env_value(env: &str, name: &str) -> String {
    env.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("{name} in {env}"))
        .trim_matches('\'')
        .to_string()
}

/// Writes `text` as a root-only file (mode 0600), as the page says.
fn secret_file(dir: &TempDir, name: &str, text: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.write(name, text);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// The `[Service]` directives of a unit file, in order.
fn service_directives(unit: &str) -> Vec<(String, String)> {
    let mut section = "";
    let mut out = Vec::new();
    for line in unit.lines().map(str::trim) {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if line.starts_with('[') {
            section = line;
        } else if section == "[Service]" {
            let (k, v) = line.split_once('=').expect("KEY=value");
            out.push((k.to_string(), v.to_string()));
        }
    }
    out
}

/// A command line as systemd splits `ExecStart=`: words, single quotes
/// kept together. The shipped unit uses nothing else: `$` and `%`
/// (which systemd expands), `\` and `"` would need more of its rules.
fn systemd_words(line: &str) -> Vec<String> {
    assert!(
        !line.contains(['$', '%', '\\', '"']),
        "the unit's command uses only single quotes: {line}"
    );
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '\'' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    assert!(!quoted, "balanced quotes: {line}");
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// The live scheduler leading, with its image and pid.
fn leader(db: &TestDb) -> Option<(String, i32)> {
    let out = db.run(&["schedulers", "--json"]);
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    list.as_array()?
        .iter()
        .find(|i| i["role"] == "leader")
        .map(|i| {
            (
                i["image"].as_str().unwrap_or_default().to_string(),
                i["pid"].as_i64().unwrap_or_default() as i32,
            )
        })
}

/// Kills a process group when dropped: what a launcher left, whatever
/// the test's outcome.
struct Group(i32);

impl Drop for Group {
    fn drop(&mut self) {
        // SAFETY: kill(2) on a process group this test made.
        unsafe { libc::kill(-self.0, libc::SIGKILL) };
    }
}

/// `make install` puts the unit where systemd finds it (`systemctl enable`
/// on the image tree, as on a live host), and systemd's own parser takes
/// every line of it without a warning.
#[test]
fn make_install_puts_the_unit_where_systemctl_enable_finds_it() {
    let dir = TempDir::new();
    let root = install(&dir);
    let unit = root.join("etc/systemd/system/orca-scheduler.service");
    assert!(unit.exists(), "{} installed", unit.display());
    let out = Command::new("systemctl")
        .arg(format!("--root={}", root.display()))
        .args(["enable", "orca-scheduler"])
        .output()
        .expect("systemctl (scripts/deps.sh installs systemd)");
    assert!(
        out.status.success(),
        "systemctl enable orca-scheduler: {}",
        text(&out.stderr)
    );
    // An absolute link, as systemd reads it once the tree is the root.
    let wants = root.join("etc/systemd/system/multi-user.target.wants/orca-scheduler.service");
    assert_eq!(
        std::fs::read_link(&wants).expect("enabled for multi-user.target"),
        Path::new("/etc/systemd/system/orca-scheduler.service")
    );
    // systemd-analyze checks that ExecStart names an executable on this
    // host: point it at the installed binary inside the image tree.
    let installed_bin = root.join(format!("{}/bin/orca", &PREFIX[1..]));
    let here = dir.write(
        "orca-scheduler.service",
        &std::fs::read_to_string(&unit).unwrap().replace(
            &format!("{PREFIX}/bin/orca"),
            &installed_bin.to_string_lossy(),
        ),
    );
    let out = Command::new("systemd-analyze")
        .args(["verify", &here])
        .output()
        .expect("systemd-analyze");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "systemd-analyze verify: {}",
        text(&out.stderr)
    );
}

/// The unit's `ExecStartPre` and `ExecStart`, run with the environment
/// systemd gives them (its `Environment=` lines and PATH, nothing of
/// ours), start a scheduler from `docs/setup.md`'s env file as written:
/// the URL and `ORCA_IMAGE` (a line without `export`) reach it, and it
/// stops with exit 0 on SIGTERM (which `Restart=on-failure` leaves down).
#[test]
fn the_unit_starts_a_scheduler_from_the_documented_env_file() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let root = install(&dir);
    let env = documented_env(&db.url);
    let env_path = secret_file(&dir, "env", &env);
    let unit =
        std::fs::read_to_string(root.join("etc/systemd/system/orca-scheduler.service")).unwrap();
    let service = service_directives(&unit);
    let get = |key: &str| -> Vec<String> {
        service
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .collect()
    };
    assert!(
        get("EnvironmentFile").is_empty(),
        "the unit reads /etc/orca/env as the shell does, not by systemd's rules"
    );
    assert_eq!(get("Restart"), ["on-failure"]);
    assert_eq!(
        get("RestartPreventExitStatus"),
        ["2"],
        "bad input is not restarted"
    );
    let argv = |line: &str| -> Vec<String> {
        systemd_words(line)
            .into_iter()
            .map(|w| {
                w.replace("/etc/orca/env", &env_path).replace(
                    &format!("{PREFIX}/bin/orca"),
                    &root.join("opt/orca/bin/orca").to_string_lossy(),
                )
            })
            .collect()
    };
    let mut environment: Vec<(String, String)> = get("Environment")
        .iter()
        .map(|e| {
            let (k, v) = e.split_once('=').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect();
    environment.push((
        "PATH".into(),
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
    ));
    let root_user = unsafe { libc::geteuid() } == 0;
    if !root_user {
        // The unit is root's: as anyone else, runs can only be ours.
        environment.push(("ORCA_RUN_AS".into(), String::new()));
    }
    let spawn = |line: &str| {
        let argv = argv(line);
        let mut c = Command::new(&argv[0]);
        c.args(&argv[1..]).env_clear().envs(environment.clone());
        c
    };
    if root_user {
        for pre in get("ExecStartPre") {
            let out = spawn(&pre).output().unwrap();
            assert!(out.status.success(), "{pre}: {}", text(&out.stderr));
        }
    }
    let start = get("ExecStart");
    assert_eq!(start.len(), 1, "one ExecStart");
    // An unquoted value with a space: one line, exit 2 (not restarted), and
    // nothing of the value said.
    std::fs::write(
        &env_path,
        "ORCA_DATABASE_URL=postgres://orca:hunter2 pw;rest@db/orca\n",
    )
    .unwrap();
    let out = spawn(&start[0]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let said = text(&out.stderr);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(
        !said.contains("hunter2") && !said.contains("pw") && !said.contains("rest@"),
        "{said}"
    );
    std::fs::write(&env_path, &env).unwrap();
    let mut scheduler = Proc::spawn(spawn(&start[0]), &dir.path("scheduler.log"));
    let image = env_value(&env, "ORCA_IMAGE");
    wait_until("the unit's scheduler leads", 60.0, || {
        leader(&db).is_some_and(|(i, _)| i == image)
    });
    // The shell exec'd orca: systemd's main process is the scheduler.
    assert_eq!(leader(&db).unwrap().1, scheduler.pid());
    assert_eq!(scheduler.terminate(30.0), 0, "{}", scheduler.output());
}

/// `user-data.sh` in a test's image tree, with its files and binary moved
/// into it: no user made, no /etc/cron.deny or iptables rule on the test
/// host (`ORCA_RUN_AS` empty). In a process group of its own, which the
/// returned [`Group`] kills.
fn user_data(root: &Path, env_path: &str, bin: &Path, log: &Path, extra: &[(&str, &str)]) -> Group {
    let mut c = Command::new("sh");
    c.arg(root.join("opt/orca/share/orca/user-data.sh"))
        .env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .env("ORCA_ENV_FILE", env_path)
        .env("ORCA_BIN", bin)
        .env("ORCA_LOG_FILE", log)
        .env("ORCA_RUN_AS", "")
        .envs(extra.iter().copied())
        .process_group(0);
    let mut script = Proc::spawn(c, &log.with_extension("out"));
    let group = Group(script.pid());
    assert_eq!(script.wait(30.0).code(), Some(0), "{}", script.output());
    group
}

/// `user-data.sh` starts a scheduler from the same file as the unit,
/// restarts it when it dies, and leaves it down after an exit 0.
#[test]
fn user_data_runs_a_scheduler_from_the_same_file() {
    let db = TestDb::new();
    let dir = TempDir::new();
    let root = install(&dir);
    let env = documented_env(&db.url);
    let env_path = secret_file(&dir, "env", &env);
    let log = dir.path("orca-scheduler.log");
    // The binary inside the image tree (the script names PREFIX's).
    let group = user_data(&root, &env_path, &root.join("opt/orca/bin/orca"), &log, &[]);
    let image = env_value(&env, "ORCA_IMAGE");
    let mut first = 0;
    wait_until("the loop's scheduler leads", 60.0, || {
        leader(&db).is_some_and(|(i, pid)| {
            first = pid;
            i == image
        })
    });
    // A crash: started again.
    unsafe { libc::kill(first, libc::SIGKILL) };
    wait_until("a new scheduler leads", 60.0, || {
        leader(&db).is_some_and(|(_, pid)| pid != first)
    });
    let (_, second) = leader(&db).unwrap();
    // A clean stop: left down.
    unsafe { libc::kill(second, libc::SIGTERM) };
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_until("the loop says it stops", 60.0, || {
        read().contains("exited 0 (stopped or drained); not restarting")
    });
    assert!(
        read().contains("orca scheduler exited (137); restarting"),
        "{}",
        read()
    );
    assert!(!read().contains(OWNER_PASSWORD), "no password in the log");
    // Nothing is started again after the exit 0: the loop is gone.
    wait_until("the loop has ended", 30.0, || group_gone(group.0));
    assert!(leader(&db).is_none(), "no scheduler after a clean exit");
}

/// Whether no live process (a zombie counts as gone) is left in process
/// group `pgid`.
fn group_gone(pgid: i32) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    !dir.flatten().any(|e| {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            return false;
        };
        // After the command's `(name)`: state, parent, process group.
        let mut f = stat.rsplit(')').next().unwrap_or("").split_whitespace();
        let state = f.next().unwrap_or("");
        let group = f.nth(1).and_then(|g| g.parse::<i32>().ok());
        group == Some(pgid) && state != "Z" && state != "X"
    })
}

/// `user-data.sh`'s log stays under `ORCA_LOG_BYTES` (with what a check's
/// interval adds), moved to `.1` as it fills, whatever the scheduler
/// prints; exit 2 (bad input) is not restarted; SIGTERM to the whole group
/// (a shutdown) ends the loop with the scheduler, which is not restarted
/// either. A stand-in scheduler prints 8 KiB a start.
#[test]
fn user_data_caps_its_log_and_stops_on_bad_input_or_sigterm() {
    let dir = TempDir::new();
    let root = install(&dir);
    let env_path = secret_file(
        &dir,
        "env",
        "ORCA_DATABASE_URL='postgres://u:secret-pw@h/db'\n",
    );
    let starts = dir.path("starts");
    let fake = dir.write(
        "orca",
        &format!(
            "#!/bin/sh\necho start >>{starts}\ni=0\nwhile [ $i -lt 80 ]; do\n               echo \"line $i of a chatty scheduler: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"\n               i=$((i + 1))\ndone\n[ -e {stop2} ] && exit 2\nexec sleep 600\n",
            starts = starts.display(),
            stop2 = dir.path("exit2").display(),
        ),
    );
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let count = |p: &Path| read(p).lines().count();

    // Bad input: started once, said, not restarted.
    let log = dir.path("bad.log");
    std::fs::write(dir.path("exit2"), "").unwrap();
    let bad = user_data(&root, &env_path, Path::new(&fake), &log, &[]);
    wait_until("the loop says it stops", 30.0, || {
        read(&log).contains("exited 2 (bad input")
    });
    wait_until("the loop has ended", 30.0, || group_gone(bad.0));
    assert_eq!(count(&starts), 1, "started once");
    std::fs::remove_file(dir.path("exit2")).unwrap();
    std::fs::remove_file(&starts).unwrap();

    // A chatty scheduler: the log is moved to .1 and emptied past the cap.
    let log = dir.path("chatty.log");
    let rotated = PathBuf::from(format!("{}.1", log.display()));
    let cap = 3000;
    let group = user_data(
        &root,
        &env_path,
        Path::new(&fake),
        &log,
        &[
            ("ORCA_LOG_BYTES", &cap.to_string()),
            ("ORCA_LOG_CHECK_SECONDS", "0.1"),
        ],
    );
    wait_until("the log is rotated", 30.0, || rotated.exists());
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len() as usize).unwrap_or(0);
    // One start prints 8 KiB at once: at most that beyond the cap.
    assert!(size(&rotated) <= cap + 9000, "{} bytes", size(&rotated));
    wait_until("the log emptied below the cap", 30.0, || size(&log) <= cap);
    assert!(!read(&rotated).contains("secret-pw") && !read(&log).contains("secret-pw"));

    // SIGTERM to every process of the group, as a shutdown sends it.
    unsafe { libc::kill(-group.0, libc::SIGTERM) };
    wait_until("the loop says it stops", 30.0, || {
        read(&log).contains("not restarting")
    });
    assert_eq!(count(&starts), 1, "not restarted after SIGTERM");
}

/// The docs say what the shipped unit does: its `Restart=` is the one
/// `deploy.md` names, and no page names another.
#[test]
fn the_docs_name_the_unit_s_restart_policy() {
    let unit = repo_file("scripts/orca-scheduler.service");
    let restart = service_directives(&unit)
        .into_iter()
        .find(|(k, _)| k == "Restart")
        .map(|(_, v)| v)
        .expect("Restart=");
    let deploy = repo_file("docs/deploy.md");
    assert!(
        deploy.contains(&format!("`Restart={restart}`")),
        "deploy.md"
    );
    for page in [
        "README.md",
        "docs/deploy.md",
        "docs/setup.md",
        "docs/aws.md",
        "docs/operations.md",
    ] {
        let text = repo_file(page);
        for (i, _) in text.match_indices("Restart=") {
            let named: String = text[i + 8..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            assert_eq!(named, restart, "{page} names Restart={named}");
        }
    }
}

/// `make install` puts the shell completions and man pages, generated from
/// the command definitions, where bash, zsh, fish and man look: bash's
/// completes `orca pi` to `pipelines`, and `man -l` renders `orca.1` with
/// every command listed (and a page of each).
#[test]
fn make_install_puts_completions_and_man_pages_where_shells_and_man_look() {
    let dir = TempDir::new();
    let root = install(&dir);
    let share = root.join(format!("{}/share", &PREFIX[1..]));
    for f in [
        "bash-completion/completions/orca",
        "zsh/site-functions/_orca",
        "fish/vendor_completions.d/orca.fish",
        "man/man1/orca.1",
        "man/man1/orca-status.1",
        "man/man1/orca-deploy-check.1",
    ] {
        assert!(share.join(f).is_file(), "{f} installed");
    }
    let bash = share.join("bash-completion/completions/orca");
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source '{}' && complete -p orca && \
             COMP_WORDS=(orca pi) COMP_CWORD=1 COMP_LINE='orca pi' COMP_POINT=7 && \
             _orca orca pi orca && echo \"offers: ${{COMPREPLY[*]}}\"",
            bash.display()
        ))
        .output()
        .unwrap();
    let said = text(&out.stdout);
    assert!(out.status.success(), "{said}{}", text(&out.stderr));
    assert!(
        said.contains("complete ") && said.contains(" orca"),
        "{said}"
    );
    assert!(said.contains("offers: pipelines\n"), "{said}");
    let zsh = std::fs::read_to_string(share.join("zsh/site-functions/_orca")).unwrap();
    assert!(zsh.starts_with("#compdef orca"), "{zsh}");
    let fish = std::fs::read_to_string(share.join("fish/vendor_completions.d/orca.fish")).unwrap();
    assert!(fish.contains("-a \"pipelines\""), "{fish}");

    let man = Command::new("man")
        .arg("-l")
        .arg(share.join("man/man1/orca.1"))
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
        .expect("man (scripts/deps.sh installs man-db)");
    let page = text(&man.stdout);
    assert!(man.status.success(), "{page}{}", text(&man.stderr));
    let help = text(&Command::new(bin()).arg("--help").output().unwrap().stdout);
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() > 20, "{help}");
    for c in commands {
        assert!(
            page.contains(&format!("orca-{c}(1)")),
            "orca.1 lists {c}:\n{page}"
        );
        assert!(
            share.join(format!("man/man1/orca-{c}.1")).is_file(),
            "orca-{c}.1"
        );
    }
}
