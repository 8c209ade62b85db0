//! A pipeline's table checked (`[pipelines.NAME]`), with its `[ec2]` table.

use std::collections::BTreeMap;

use toml::Spanned;
use toml::de::DeValue;

use super::checker::{
    Checker, MAX_ENV_VALUE_BYTES, MAX_ENV_VARS, MAX_RETRIES, MAX_RUNS, MAX_SHORT_BYTES,
    MAX_WORKERS, Seen,
};
use super::text::Problem;
use crate::config::cron::{fires_ever, parse_schedule};
use crate::config::spec::{
    Command, DEFAULT_MAX_FILLS, Ec2Spec, MachineSettings, Market, OnLost, Pipeline, Placement,
};

impl Checker {
    pub(super) fn pipeline(
        &mut self,
        name: &Spanned<std::borrow::Cow<str>>,
        v: &Spanned<DeValue>,
    ) -> Option<Pipeline> {
        let table = self.named_table("pipeline", name, v)?;
        let before = self.problems.len();
        let mut p = Pipeline {
            name: name.get_ref().to_string(),
            command: Command::Argv(vec![]),
            placement: Placement::Local,
            max_runs: 1,
            max_fills: DEFAULT_MAX_FILLS,
            schedule: None,
            retries: 0,
            retry_delay: 60.0,
            timeout: None,
            env: BTreeMap::new(),
            alert: None,
            sensor: None,
            sensor_every: 60.0,
            ec2: None,
            on_lost: OnLost::Retry,
        };
        let mut command = None;
        let mut ec2_at = None;
        for (k, v) in table.iter() {
            let key = k.get_ref().as_ref();
            match key {
                "command" => command = self.command(key, v),
                "placement" => {
                    if let Some(s) = self.string(key, v) {
                        match Placement::parse(&s) {
                            Some(pl) => {
                                if let Placement::Worker(pool) = &pl {
                                    let line = self.line(v.span().start);
                                    self.worker_refs.push((pool.clone(), line));
                                }
                                p.placement = pl
                            }
                            None => self.say(
                                v,
                                format!(
                                    "bad placement '{s}': want \"local\", \"worker:<pool>\" or \"ec2\""
                                ),
                            ),
                        }
                    }
                }
                "max_runs" => {
                    if let Some(n) = self.integer(key, v, 1, MAX_RUNS) {
                        p.max_runs = n as i32;
                    }
                }
                "max_fills" => {
                    if let Some(n) = self.integer(key, v, 1, MAX_RUNS) {
                        p.max_fills = n as i32;
                    }
                }
                "schedule" => {
                    if let Some(s) = self.string(key, v) {
                        match parse_schedule(&s) {
                            Ok(cron) if fires_ever(&cron) => p.schedule = Some(s),
                            Ok(_) => self.say(
                                v,
                                format!("schedule \"{s}\" never fires (no month has such a day)"),
                            ),
                            Err(e) => self.say(v, e),
                        }
                    }
                }
                "retries" => {
                    if let Some(n) = self.integer(key, v, 0, MAX_RETRIES) {
                        p.retries = n as i32;
                    }
                }
                "retry_delay" => {
                    if let Some(n) = self.seconds(key, v, true) {
                        p.retry_delay = n;
                    }
                }
                "timeout" => p.timeout = self.seconds(key, v, false),
                "env" => match v.get_ref() {
                    DeValue::Table(t) if t.len() > MAX_ENV_VARS => self.say(
                        v,
                        format!("env: at most {MAX_ENV_VARS} variables (got {})", t.len()),
                    ),
                    DeValue::Table(t) => {
                        for (ek, ev) in t.iter() {
                            let name = ek.get_ref().to_string();
                            if !self.storable("env: a variable name", ek, &name, MAX_SHORT_BYTES) {
                                continue;
                            }
                            if name.is_empty() || name.contains('=') {
                                self.say(ek, format!("env: bad variable name '{name}'"));
                                continue;
                            }
                            let key = format!("env.{name}");
                            if let Some(s) = self.string_max(&key, ev, MAX_ENV_VALUE_BYTES) {
                                p.env.insert(name, s);
                            }
                        }
                    }
                    _ => self.say(v, "env must be a table of strings"),
                },
                "alert" => {
                    if let Some(s) = self.string(key, v) {
                        if s.starts_with("http://") || s.starts_with("https://") {
                            p.alert = Some(s);
                        } else {
                            self.say(v, "alert must be an http:// or https:// URL");
                        }
                    }
                }
                "sensor" => p.sensor = self.command(key, v),
                "on_lost" => {
                    if let Some(s) = self.string(key, v) {
                        match OnLost::parse(&s) {
                            Some(o) => p.on_lost = o,
                            None => self
                                .say(v, format!("bad on_lost '{s}': want \"retry\" or \"fail\"")),
                        }
                    }
                }
                "ec2" => {
                    ec2_at = Some(self.line(v.span().start));
                    p.ec2 = self.ec2_spec(&p.name, v);
                }
                "sensor_every" => {
                    if let Some(n) = self.seconds(key, v, false) {
                        p.sensor_every = n;
                    }
                }
                other => self.say(k, format!("unknown key '{other}' in pipelines.{}", p.name)),
            }
        }
        match command {
            Some(c) => p.command = c,
            None if !table.contains_key("command") => {
                self.say(name, format!("pipelines.{}: missing command", p.name));
            }
            None => {}
        }
        match (&p.placement, ec2_at) {
            (Placement::Ec2, None) => self.say(
                name,
                format!(
                    "pipelines.{}: placement \"ec2\" needs a [pipelines.{}.ec2] table",
                    p.name, p.name
                ),
            ),
            (Placement::Ec2, Some(_)) | (_, None) => {}
            (_, Some(line)) => self.problems.push(Problem {
                line,
                message: format!("pipelines.{}.ec2 is for placement \"ec2\" only", p.name),
            }),
        }
        (self.problems.len() == before).then_some(p)
    }

    /// `[pipelines.NAME.ec2]`.
    pub(super) fn ec2_spec(&mut self, pipeline: &str, v: &Spanned<DeValue>) -> Option<Ec2Spec> {
        let DeValue::Table(table) = v.get_ref() else {
            self.say(v, format!("pipelines.{pipeline}.ec2 must be a table"));
            return None;
        };
        let before = self.problems.len();
        let mut m = MachineSettings::default();
        let mut seen = Seen::default();
        let mut type_ = None;
        let mut e = Ec2Spec {
            machines: MachineSettings::default(),
            type_: String::new(),
            workers: 0,
            head_service: None,
            worker_service: None,
            update: None,
            market: Market::OnDemand,
            max_price: None,
        };
        let mut market = Some(Market::OnDemand);
        for (k, v) in table.iter() {
            let key = k.get_ref().as_ref();
            if self.machine_key(key, v, &mut m, &mut seen) {
                continue;
            }
            match key {
                "type" => type_ = self.string(key, v),
                "workers" => {
                    if let Some(n) = self.integer(key, v, 0, MAX_WORKERS) {
                        e.workers = n as i32;
                    }
                }
                "head_service" => e.head_service = self.command(key, v),
                "worker_service" => e.worker_service = self.command(key, v),
                "update" => e.update = self.command(key, v),
                "market" => market = self.market(v),
                "max_price" => e.max_price = self.max_price(v),
                other => self.say(
                    k,
                    format!("unknown key '{other}' in pipelines.{pipeline}.ec2"),
                ),
            }
        }
        let what = format!("pipelines.{pipeline}.ec2");
        if let Some(m) = market {
            e.market = m;
            self.max_price_only_with_spot(v, m, e.max_price.as_ref());
        }
        match &type_ {
            Some(t) => e.type_ = t.clone(),
            None if !table.contains_key("type") => self.say(v, format!("{what}: missing type")),
            None => {}
        }
        if m.locations.is_empty() && !table.contains_key("locations") {
            self.say(v, format!("{what}: missing locations"));
        }
        self.machine_checks(v, &what, &m, type_.as_slice(), seen);
        e.machines = m;
        (self.problems.len() == before).then_some(e)
    }
}
