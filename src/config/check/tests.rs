use super::text::*;
use super::*;
use crate::config::spec::{DEFAULT_MAX_FILLS, Market, OnLost, Pipeline, Placement, PoolType};

/// Whether a problem on `line` says `text`.
fn has(problems: &[Problem], line: usize, text: &str) -> bool {
    problems
        .iter()
        .any(|p| p.line == line && p.message.contains(text))
}

#[test]
fn a_good_file_parses() {
    let c = parse(
        r#"
[pipelines.hello]
command = "echo hi"
schedule = "*/5 * * * *"
max_runs = 2
retries = 3
retry_delay = 1.5
timeout = 30
env = { A = "b" }
alert = "http://127.0.0.1:9/hook"

[pipelines.argv]
command = ["/bin/echo", "x"]
placement = "worker:gpu"
sensor = "test -f /tmp/x"
sensor_every = 5

[pools.gpu]
types = [{ type = "t" }]
locations = ["here"]
"#,
    )
    .unwrap();
    assert_eq!(c.pipelines.len(), 2);
    let h = &c.pipelines.iter().find(|p| p.name == "hello").unwrap();
    assert_eq!(h.max_runs, 2);
    assert_eq!(h.retry_delay, 1.5);
    assert_eq!(h.env["A"], "b");
    let a = &c.pipelines.iter().find(|p| p.name == "argv").unwrap();
    assert_eq!(a.placement, Placement::Worker("gpu".into()));
    assert_eq!(a.command.argv(&["y".into()]), vec!["/bin/echo", "x", "y"]);
}

#[test]
fn every_problem_has_its_line() {
    let text = "[pipelines.a]\ncommand = \"x\"\nbogus = 1\n\n[pipelines.b]\nschedule = \"61 * * * *\"\n\n[pipelines.c]\ncommand = \"x\"\nmax_runs = -1\nplacement = \"mars\"\n";
    let problems = parse(text).unwrap_err();
    assert!(has(&problems, 3, "unknown key 'bogus'"), "{problems:?}");
    assert!(
        has(
            &problems,
            6,
            "schedule \"61 * * * *\": minute field: 61 is out of range 0-59"
        ),
        "{problems:?}"
    );
    assert!(has(&problems, 5, "missing command"), "{problems:?}");
    assert!(has(&problems, 10, "negative"), "{problems:?}");
    assert!(has(&problems, 11, "bad placement"), "{problems:?}");
}

#[test]
fn pools_parse_and_are_checked() {
    let c = parse(
        r#"
[pools.gpu]
provider = "local"
types = [{ type = "big", wait = 30 }, { type = "small" }]
locations = ["a", "b"]
max_machines = 3
idle_seconds = 60
slots = 2
capacity = { a = 1, b = 0 }

[pipelines.train]
command = "true"
placement = "worker:gpu"
"#,
    )
    .unwrap();
    let pool = &c.pools[0];
    assert_eq!(pool.types[0], PoolType::on_demand("big", 30.0));
    assert_eq!(pool.types[1].wait, 0.0);
    assert_eq!(pool.machines.capacity["b"], 0);
    assert_eq!(pool.slots, 2);

    let text = "[pools.p]\nprovider = \"moon\"\ntypes = []\nmax_machines = 0\n\n[pipelines.x]\ncommand = \"true\"\nplacement = \"worker:nope\"\n";
    let problems = parse(text).unwrap_err();
    assert!(
        has(&problems, 1, "pools.p: missing locations"),
        "{problems:?}"
    );
    assert!(has(&problems, 2, "bad provider"), "{problems:?}");
    assert!(has(&problems, 3, "types must be"), "{problems:?}");
    assert!(has(&problems, 4, "at least 1"), "{problems:?}");
    assert!(has(&problems, 8, "no [pools.nope]"), "{problems:?}");
}

#[test]
fn ec2_runs_parse_and_are_checked() {
    let c = parse(
        r#"
[pipelines.train]
command = "python train.py"
placement = "ec2"

[pipelines.train.ec2]
provider = "ec2"
type = "g6.xlarge"
locations = ["subnet-a", "subnet-b"]
ami = "ami-1"
security_groups = ["sg-1"]
workers = 2
head_service = "ray start --head --block"
worker_service = ["ray", "start", "--block"]
update = "git pull"
"#,
    )
    .unwrap();
    let e = c.pipelines[0].ec2.as_ref().unwrap();
    assert_eq!((e.type_.as_str(), e.workers), ("g6.xlarge", 2));
    assert_eq!(e.machines.locations, ["subnet-a", "subnet-b"]);
    assert_eq!(e.machines.ami.as_deref(), Some("ami-1"));
    assert!(e.head_service.is_some() && e.worker_service.is_some() && e.update.is_some());
    // Stored and read back as the scheduler reads it.
    let spec = serde_json::to_value(&c.pipelines[0]).unwrap();
    let back: Pipeline = serde_json::from_value(spec).unwrap();
    assert_eq!(&back, &c.pipelines[0]);

    let text = "[pipelines.a]\ncommand = \"true\"\nplacement = \"ec2\"\n\n\
                [pipelines.b]\ncommand = \"true\"\n[pipelines.b.ec2]\ntype = \"t\"\nlocations = [\"x\"]\n\n\
                [pipelines.c]\ncommand = \"true\"\nplacement = \"ec2\"\n[pipelines.c.ec2]\nprovider = \"ec2\"\nlocations = [\"x\"]\nworkers = -1\ncolour = 1\n";
    let problems = parse(text).unwrap_err();
    assert!(
        has(&problems, 1, "needs a [pipelines.a.ec2] table"),
        "{problems:?}"
    );
    assert!(
        has(&problems, 7, "is for placement \"ec2\" only"),
        "{problems:?}"
    );
    assert!(has(&problems, 14, "missing type"), "{problems:?}");
    assert!(has(&problems, 14, "needs an ami"), "{problems:?}");
    assert!(has(&problems, 17, "must not be negative"), "{problems:?}");
    assert!(has(&problems, 18, "unknown key 'colour'"), "{problems:?}");
}

#[test]
fn lines_are_found_in_the_table_of_line_starts() {
    let text = "a\nbc\n\nd";
    let starts = line_starts(text);
    assert_eq!(starts, [0, 2, 5, 6]);
    let lines: Vec<usize> = (0..=text.len()).map(|o| line_of(&starts, o)).collect();
    assert_eq!(lines, [1, 1, 2, 2, 2, 3, 4, 4]);
    assert_eq!(line_of(&line_starts(""), 0), 1);
}

#[test]
fn at_most_so_many_problems_are_shown_then_a_count() {
    let problems: Vec<Problem> = (1..=5)
        .map(|line| Problem {
            line,
            message: format!("bad\n{line}\0"),
        })
        .collect();
    let lines = shown("f.toml", &problems, 3);
    assert_eq!(
        lines,
        [
            "f.toml:1: bad\\u{a}1\\u{0}",
            "f.toml:2: bad\\u{a}2\\u{0}",
            "f.toml:3: bad\\u{a}3\\u{0}",
            "f.toml: ... and 2 more problems",
        ]
    );
    assert_eq!(shown("f.toml", &problems[..3], 3).len(), 3);
    let one_more = shown("f.toml", &problems[..4], 3);
    assert_eq!(one_more[3], "f.toml: ... and 1 more problem");
}

#[test]
fn a_file_is_read_up_to_its_limit_and_one_byte_more() {
    let dir = std::env::temp_dir().join(format!("orca-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("f.toml");
    let path = path.to_str().unwrap();
    std::fs::write(path, "x".repeat(10)).unwrap();
    assert_eq!(read_limited(path, 10).unwrap().len(), 10);
    let e = read_limited(path, 9).unwrap_err();
    assert!(e.starts_with(&format!("{path}: over 9 bytes")), "{e}");
    let e = read_limited("/dev/zero", 1 << 20).unwrap_err();
    assert!(e.contains("over 1 MiB"), "{e}");
    std::fs::write(path, b"a\xff").unwrap();
    assert!(read_limited(path, 10).unwrap_err().contains("not UTF-8"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_schedule_that_never_fires_is_refused() {
    for never in ["0 0 31 2 *", "0 0 30 2 *", "0 0 0 31 4 *", "0 0 30,31 2 *"] {
        let text = format!("[pipelines.a]\ncommand = \"true\"\nschedule = \"{never}\"\n");
        let problems = parse(&text).unwrap_err();
        assert!(has(&problems, 3, "never fires"), "{never}: {problems:?}");
    }
    // Feb 29 fires in leap years; a weekday listed beside a day fires on it.
    for fires in [
        "0 0 29 2 *",
        "0 0 31 2 1",
        "0 0 L 2 *",
        "0 12 31 * *",
        "@yearly",
    ] {
        let text = format!("[pipelines.a]\ncommand = \"true\"\nschedule = \"{fires}\"\n");
        assert!(parse(&text).is_ok(), "{fires}: {:?}", parse(&text));
    }
}

#[test]
fn absurd_numbers_are_refused_naming_the_limit() {
    let text = "[pipelines.a]\ncommand = \"true\"\nplacement = \"ec2\"\nmax_runs = 100000\nretries = 100000\n\
                [pipelines.a.ec2]\nprovider = \"local\"\ntype = \"t\"\nlocations = [\"x\"]\nworkers = 100000\n\
                [pools.p]\ntypes = [{ type = \"t\" }]\nlocations = [\"x\"]\nmax_machines = 100000\nslots = 100000\n";
    let problems = parse(text).unwrap_err();
    assert!(
        has(&problems, 4, "max_runs must be at most 10000"),
        "{problems:?}"
    );
    assert!(
        has(&problems, 5, "retries must be at most 1000"),
        "{problems:?}"
    );
    assert!(
        has(&problems, 10, "workers must be at most 256"),
        "{problems:?}"
    );
    assert!(
        has(&problems, 14, "max_machines must be at most 1000"),
        "{problems:?}"
    );
    assert!(
        has(&problems, 15, "slots must be at most 256"),
        "{problems:?}"
    );
    for (value, said) in [
        ("0", "max_fills must be at least 1"),
        ("10001", "max_fills must be at most 10000"),
    ] {
        let text = format!("[pipelines.a]\ncommand = \"true\"\nmax_fills = {value}\n");
        let problems = parse(&text).unwrap_err();
        assert!(has(&problems, 3, said), "{problems:?}");
    }
    let a = &parse("[pipelines.a]\ncommand = \"true\"\nmax_fills = 3\n")
        .unwrap()
        .pipelines[0];
    assert_eq!(a.max_fills, 3);
    let a = &parse("[pipelines.a]\ncommand = \"true\"\n")
        .unwrap()
        .pipelines[0];
    assert_eq!(a.max_fills, DEFAULT_MAX_FILLS);
    let fine = "[pipelines.a]\ncommand = \"true\"\nplacement = \"ec2\"\n\
                [pipelines.a.ec2]\nprovider = \"local\"\ntype = \"t\"\nlocations = [\"x\"]\nworkers = 256\n";
    assert!(parse(fine).is_ok(), "{:?}", parse(fine));
}

#[test]
fn a_nul_in_any_stored_string_is_refused() {
    let cases = [
        "command = \"echo \\u0000\"",
        "command = [\"echo\", \"a\\u0000b\"]",
        "env = { A = \"x\\u0000\" }",
        "env = { \"A\\u0000\" = \"x\" }",
        "schedule = \"0 3 * * *\\u0000\"",
        "alert = \"http://x/\\u0000\"",
        "sensor = \"test\\u0000\"",
        "placement = \"worker:p\\u0000\"",
    ];
    for case in cases {
        let text = format!("[pipelines.a]\ncommand = \"true\"\n{case}\n");
        let text = text.replacen("command = \"true\"\ncommand", "command", 1);
        let problems = parse(&text).unwrap_err();
        assert!(
            problems.iter().any(|p| p.message.contains("NUL byte")),
            "{case}: {problems:?}"
        );
    }
    let pool = "[pools.p]\ntypes = [{ type = \"t\" }]\nlocations = [\"x\"]\n";
    for case in [
        pool.replace("[\"x\"]", "[\"x\\u0000\"]"),
        pool.replace("\"t\"", "\"t\\u0000\""),
        format!("{pool}image = \"i\\u0000\""),
        format!("{pool}capacity = {{ \"x\\u0000\" = 1 }}"),
    ] {
        let text = format!("{case}\n");
        let problems = parse(&text).unwrap_err();
        assert!(
            problems.iter().any(|p| p.message.contains("NUL byte")),
            "{case}: {problems:?}"
        );
    }
    for case in [
        "ami = \"a\\u0000\"",
        "region = \"r\\u0000\"",
        "security_groups = [\"s\\u0000\"]",
        "update = \"u\\u0000\"",
    ] {
        let text = format!(
            "[pipelines.a]\ncommand = \"true\"\nplacement = \"ec2\"\n[pipelines.a.ec2]\nprovider = \"ec2\"\ntype = \"t\"\nlocations = [\"x\"]\n{case}\n"
        );
        let text = if case.starts_with("ami") {
            text
        } else {
            text.replace(
                "\n[pipelines.a.ec2]\n",
                "\n[pipelines.a.ec2]\nami = \"ami\"\n",
            )
        };
        let problems = parse(&text).unwrap_err();
        assert!(
            problems.iter().any(|p| p.message.contains("NUL byte")),
            "{case}: {problems:?}"
        );
    }
}

#[test]
fn strings_and_tables_are_bounded() {
    let long = "x".repeat(65 * 1024);
    let text = format!("[pipelines.a]\ncommand = \"{long}\"\n");
    let problems = parse(&text).unwrap_err();
    assert!(
        has(&problems, 2, "command is longer than 64 KiB"),
        "{problems:?}"
    );
    let text = format!("[pipelines.a]\ncommand = \"true\"\nenv = {{ A = \"{long}\" }}\n");
    let problems = parse(&text).unwrap_err();
    assert!(
        has(&problems, 3, "env.A is longer than 64 KiB"),
        "{problems:?}"
    );
    let many: Vec<String> = (0..300).map(|n| format!("V{n} = \"x\"")).collect();
    let text = format!(
        "[pipelines.a]\ncommand = \"true\"\nenv = {{ {} }}\n",
        many.join(", ")
    );
    let problems = parse(&text).unwrap_err();
    assert!(has(&problems, 3, "at most 256 variables"), "{problems:?}");
    let text = format!(
        "[pipelines.a]\ncommand = \"true\"\nalert = \"http://{}\"\n",
        "x".repeat(2000)
    );
    let problems = parse(&text).unwrap_err();
    assert!(
        has(&problems, 3, "alert is longer than 1 KiB"),
        "{problems:?}"
    );
    // A name is at most 64 characters.
    let text = format!("[pipelines.{}]\ncommand = \"true\"\n", "n".repeat(65));
    assert!(parse(&text).is_err());
    let text = format!("[pipelines.{}]\ncommand = \"true\"\n", "n".repeat(64));
    assert!(parse(&text).is_ok());
}

#[test]
fn on_lost_is_retry_or_fail() {
    let text = "[pipelines.a]\ncommand = \"true\"\non_lost = \"fail\"\n\n[pipelines.b]\ncommand = \"true\"\n";
    let c = parse(text).unwrap();
    assert_eq!(c.pipelines[0].on_lost, OnLost::Fail);
    assert_eq!(c.pipelines[1].on_lost, OnLost::Retry);
    let problems = parse("[pipelines.a]\ncommand = \"true\"\non_lost = \"never\"\n").unwrap_err();
    assert!(has(&problems, 3, "bad on_lost 'never'"), "{problems:?}");
}

#[test]
fn syntax_errors_have_a_line() {
    let problems = parse("[pipelines.a]\ncommand = \"x\"\nmax_runs = = 3\n").unwrap_err();
    assert_eq!(problems[0].line, 3, "{problems:?}");
}

#[test]
fn ami_takes_one_ami_or_one_per_architecture() {
    let text = "[pools.p]\nprovider = \"ec2\"\nami = { x86_64 = \"ami-x\", arm64 = \"ami-a\" }\n\
                types = [{ type = \"m7g.large\" }, { type = \"t3.micro\" }]\nlocations = [\"subnet-a\"]\n\n\
                [pipelines.t]\ncommand = \"true\"\nplacement = \"ec2\"\n[pipelines.t.ec2]\nprovider = \"ec2\"\n\
                type = \"c7g.large\"\nlocations = [\"subnet-a\"]\nami = { arm64 = \"ami-a\" }\n";
    let c = parse(text).unwrap();
    let amis = &c.pools[0].machines.amis;
    assert_eq!(amis.get("x86_64").map(String::as_str), Some("ami-x"));
    assert_eq!(amis.get("arm64").map(String::as_str), Some("ami-a"));
    assert_eq!(c.pools[0].machines.ami, None);
    let e = c.pipelines[0].ec2.as_ref().unwrap();
    assert_eq!(e.machines.amis.len(), 1);

    let bad = "[pools.p]\nprovider = \"ec2\"\nami = { x86 = \"ami-x\", arm64 = \"ami-a\" }\n\
               types = [{ type = \"t\" }]\nlocations = [\"x\"]\n\n\
               [pools.q]\nprovider = \"ec2\"\nami = {}\ntypes = [{ type = \"t\" }]\nlocations = [\"x\"]\n\n\
               [pools.r]\nprovider = \"ec2\"\nami = { arm64 = 1 }\ntypes = [{ type = \"t\" }]\nlocations = [\"x\"]\n\n\
               [pools.s]\nprovider = \"ec2\"\nami = [\"ami-1\"]\ntypes = [{ type = \"t\" }]\nlocations = [\"x\"]\n\n\
               [pools.l]\nami = { arm64 = \"ami-a\" }\ntypes = [{ type = \"t\" }]\nlocations = [\"x\"]\n";
    let problems = parse(bad).unwrap_err();
    assert!(
        has(
            &problems,
            3,
            "unknown architecture 'x86': want x86_64 or arm64"
        ),
        "{problems:?}"
    );
    assert!(has(&problems, 9, "the table is empty"), "{problems:?}");
    // A malformed ami is said where it is, not also called missing.
    assert!(
        !problems.iter().any(|p| p.message.contains("needs an ami")),
        "{problems:?}"
    );
    assert!(
        has(&problems, 15, "ami.arm64 must be a string"),
        "{problems:?}"
    );
    assert!(
        has(&problems, 21, "ami must be a string or a table"),
        "{problems:?}"
    );
    assert!(
        has(&problems, 26, "settings of the ec2 provider"),
        "{problems:?}"
    );
}

#[test]
fn a_pool_walks_spot_then_on_demand_steps_of_one_type() {
    let c = parse(
        r#"
[pools.p]
types = [
  { type = "c7g.large", market = "spot", max_price = "0.05" },
  { type = "c7g.large", wait = 60 },
  { type = "m7g.large", market = "on-demand" },
  { type = "m7g.large", market = "spot" },
]
locations = ["here"]
"#,
    )
    .unwrap();
    let t = &c.pools[0].types;
    assert_eq!(t[0].market, Market::Spot);
    assert_eq!(t[0].max_price.as_deref(), Some("0.05"));
    assert_eq!(t[1], PoolType::on_demand("c7g.large", 60.0));
    assert_eq!(t[2], PoolType::on_demand("m7g.large", 0.0));
    assert_eq!(
        (t[3].market, t[3].max_price.as_deref()),
        (Market::Spot, None)
    );
}

#[test]
fn a_bad_market_or_max_price_is_refused() {
    let text = r#"[pools.p]
locations = ["here"]
types = [
  { type = "a", market = "auction" },
  { type = "b", market = "spot", max_price = "-0.05" },
  { type = "c", max_price = "0.05" },
  { type = "d", market = "spot", max_price = 0.05 },
  { type = "e", market = "spot" },
  { type = "e", market = "spot" },
  { type = "f", market = "spot", max_price = "0.000" },
  { type = "g", market = "on-demand", max_price = "1" },
]
"#;
    let problems = parse(text).unwrap_err();
    assert!(has(&problems, 4, "bad market 'auction'"), "{problems:?}");
    assert!(has(&problems, 5, "bad max_price \"-0.05\""), "{problems:?}");
    assert!(
        has(&problems, 6, "max_price is for market = \"spot\" only"),
        "{problems:?}"
    );
    assert!(
        has(&problems, 7, "max_price must be a string"),
        "{problems:?}"
    );
    assert!(
        has(&problems, 9, "type e (spot) is listed twice"),
        "{problems:?}"
    );
    assert!(has(&problems, 10, "it must be above 0"), "{problems:?}");
    assert!(
        has(&problems, 11, "max_price is for market"),
        "{problems:?}"
    );
    assert_eq!(problems.len(), 7, "{problems:?}");
}

#[test]
fn max_prices_are_positive_bounded_decimals() {
    use super::pool::bad_max_price;
    for good in ["0.05", "3", "0.0001", ".5", "12.", "1234567890.12345"] {
        assert_eq!(bad_max_price(good), None, "{good}");
    }
    for bad in [
        "",
        ".",
        "0",
        "0.0",
        "-1",
        "1e3",
        "0x1",
        "1.2.3",
        " 1",
        "1,5",
        "$1",
        "12345678901234567",
    ] {
        assert!(bad_max_price(bad).is_some(), "{bad}");
    }
}

#[test]
fn an_ec2_run_may_ask_for_spot() {
    let ec2 = |extra: &str| {
        format!(
            "[pipelines.t]\ncommand = \"x\"\nplacement = \"ec2\"\n\n[pipelines.t.ec2]\nprovider = \"ec2\"\ntype = \"g6.xlarge\"\nlocations = [\"subnet-a\"]\nami = \"ami-1\"\n{extra}"
        )
    };
    let c = parse(&ec2("market = \"spot\"\nmax_price = \"1.5\"\n")).unwrap();
    let e = c.pipelines[0].ec2.as_ref().unwrap();
    assert_eq!(
        (e.market, e.max_price.as_deref()),
        (Market::Spot, Some("1.5"))
    );
    let c = parse(&ec2("")).unwrap();
    assert_eq!(
        c.pipelines[0].ec2.as_ref().unwrap().market,
        Market::OnDemand
    );
    let problems = parse(&ec2("market = \"cheap\"\n")).unwrap_err();
    assert!(has(&problems, 10, "bad market 'cheap'"), "{problems:?}");
    let problems = parse(&ec2("max_price = \"1\"\n")).unwrap_err();
    assert!(
        problems
            .iter()
            .any(|p| p.message.contains("max_price is for market")),
        "{problems:?}"
    );
}
