//! A pool's table checked (`[pools.NAME]`), with its `types`.

use toml::Spanned;
use toml::de::DeValue;

use super::checker::{Checker, MAX_LIST_ITEMS, MAX_MACHINES, MAX_SLOTS, Seen};
use crate::config::spec::{MachineSettings, Market, Pool, PoolType};

/// The longest `max_price` string taken.
pub(super) const MAX_PRICE_CHARS: usize = 16;

/// Why `s` is not a `max_price` (a decimal string above 0, at most
/// [`MAX_PRICE_CHARS`] characters: `"0.05"`, `"3"`), if it isn't.
pub(super) fn bad_max_price(s: &str) -> Option<String> {
    let shape = !s.is_empty()
        && s.len() <= MAX_PRICE_CHARS
        && s.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && s.bytes().filter(|&b| b == b'.').count() <= 1
        && s.bytes().any(|b| b.is_ascii_digit());
    if !shape {
        return Some(format!(
            "bad max_price \"{}\": want a decimal string above 0 of at most {MAX_PRICE_CHARS} characters, like \"0.05\"",
            s.chars().take(MAX_PRICE_CHARS + 4).collect::<String>()
        ));
    }
    if !s.bytes().any(|b| (b'1'..=b'9').contains(&b)) {
        return Some(format!("bad max_price \"{s}\": it must be above 0"));
    }
    None
}

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
                            let Some(t) = self.pool_type(item) else {
                                continue;
                            };
                            // A step is (type, market): the same type may be
                            // tried spot then on-demand, never twice alike.
                            if p.types
                                .iter()
                                .any(|o| o.name == t.name && o.market == t.market)
                            {
                                self.say(
                                    item,
                                    format!(
                                        "types: type {} ({}) is listed twice",
                                        t.name,
                                        t.market.as_text()
                                    ),
                                );
                            }
                            p.types.push(t);
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
        let mut market = Some(Market::OnDemand);
        let mut max_price = None;
        for (k, v) in t.iter() {
            match k.get_ref().as_ref() {
                "type" => name = self.string("type", v).filter(|s| !s.is_empty()),
                "wait" => wait = self.seconds("wait", v, true)?,
                "market" => market = self.market(v),
                "max_price" => max_price = Some(self.max_price(v)?),
                other => self.say(k, format!("unknown key '{other}' in a type")),
            }
        }
        if name.is_none() {
            self.say(item, "types: every item needs a type");
        }
        let market = market?;
        self.max_price_only_with_spot(item, market, max_price.as_ref());
        Some(PoolType {
            name: name?,
            wait,
            market,
            max_price,
        })
    }

    /// A `market`: `"on-demand"` or `"spot"`.
    pub(super) fn market(&mut self, v: &Spanned<DeValue>) -> Option<Market> {
        let s = self.string("market", v)?;
        let m = Market::parse(&s);
        if m.is_none() {
            self.say(
                v,
                format!("bad market '{s}': want \"on-demand\" or \"spot\""),
            );
        }
        m
    }

    /// A `max_price` ([`bad_max_price`]).
    pub(super) fn max_price(&mut self, v: &Spanned<DeValue>) -> Option<String> {
        let DeValue::String(s) = v.get_ref() else {
            self.say(v, "max_price must be a string, like \"0.05\"");
            return None;
        };
        if let Some(why) = bad_max_price(s) {
            self.say(v, why);
            return None;
        }
        Some(s.to_string())
    }

    /// `max_price` is a spot setting.
    pub(super) fn max_price_only_with_spot<T>(
        &mut self,
        at: &Spanned<T>,
        market: Market,
        max_price: Option<&String>,
    ) {
        if max_price.is_some() && market != Market::Spot {
            self.say(at, "max_price is for market = \"spot\" only");
        }
    }
}
