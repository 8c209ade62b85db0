//! A pool's table checked (`[pools.NAME]`), with its `types`.

use toml::Spanned;
use toml::de::DeValue;

use super::checker::{Checker, MAX_LIST_ITEMS, MAX_MACHINES, MAX_SLOTS, Seen};
use crate::config::spec::{MachineSettings, Pool, PoolType};

impl Checker {
    pub(super) fn pool(
        &mut self,
        name: &Spanned<std::borrow::Cow<str>>,
        v: &Spanned<DeValue>,
    ) -> Option<Pool> {
        let table = self.named_table("pool", name, v)?;
        let before = self.problems.len();
        let mut p = Pool {
            name: name.get_ref().to_string(),
            types: Vec::new(),
            max_machines: 1,
            idle_seconds: 300.0,
            slots: 1,
            image: None,
            machines: MachineSettings::default(),
        };
        let mut m = MachineSettings::default();
        let mut seen = Seen::default();
        for (k, v) in table.iter() {
            let key = k.get_ref().as_ref();
            if self.machine_key(key, v, &mut m, &mut seen) {
                continue;
            }
            match key {
                "types" => match v.get_ref() {
                    DeValue::Array(a) if a.len() > MAX_LIST_ITEMS => self.say(
                        v,
                        format!("types: at most {MAX_LIST_ITEMS} items (got {})", a.len()),
                    ),
                    DeValue::Array(a) if !a.is_empty() => {
                        for item in a.iter() {
                            if let Some(t) = self.pool_type(item) {
                                p.types.push(t);
                            }
                        }
                    }
                    _ => self.say(
                        v,
                        "types must be a non-empty array of { type = \"...\", wait = SECONDS }",
                    ),
                },
                "max_machines" => {
                    if let Some(n) = self.integer(key, v, 1, MAX_MACHINES) {
                        p.max_machines = n as i32;
                    }
                }
                "idle_seconds" => {
                    if let Some(n) = self.seconds(key, v, true) {
                        p.idle_seconds = n;
                    }
                }
                "slots" => {
                    if let Some(n) = self.integer(key, v, 1, MAX_SLOTS) {
                        p.slots = n as i32;
                    }
                }
                "image" => p.image = self.string(key, v),
                other => self.say(k, format!("unknown key '{other}' in pools.{}", p.name)),
            }
        }
        for (key, missing) in [
            ("types", p.types.is_empty()),
            ("locations", m.locations.is_empty()),
        ] {
            if missing && !table.contains_key(key) {
                self.say(name, format!("pools.{}: missing {key}", p.name));
            }
        }
        let types: Vec<String> = p.types.iter().map(|t| t.name.clone()).collect();
        self.machine_checks(name, &format!("pools.{}", p.name), &m, &types, seen);
        p.machines = m;
        (self.problems.len() == before).then_some(p)
    }

    pub(super) fn pool_type(&mut self, item: &Spanned<DeValue>) -> Option<PoolType> {
        let DeValue::Table(t) = item.get_ref() else {
            self.say(
                item,
                "types: every item must be { type = \"...\", wait = SECONDS }",
            );
            return None;
        };
        let mut name = None;
        let mut wait = 0.0;
        for (k, v) in t.iter() {
            match k.get_ref().as_ref() {
                "type" => name = self.string("type", v).filter(|s| !s.is_empty()),
                "wait" => wait = self.seconds("wait", v, true)?,
                other => self.say(k, format!("unknown key '{other}' in a type")),
            }
        }
        if name.is_none() {
            self.say(item, "types: every item needs a type");
        }
        Some(PoolType { name: name?, wait })
    }
}
