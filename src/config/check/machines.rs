//! The machine settings a pool and an EC2 run share (`provider`, `ami`,
//! `locations`, `capacity`...), read and checked together.

use toml::Spanned;
use toml::de::DeValue;

use super::checker::{Checker, MAX_CAPACITY, MAX_SHORT_BYTES, Seen};
use super::text::Problem;
use std::collections::BTreeMap;

use crate::config::arch::AMI_KEYS;
use crate::config::spec::{MachineSettings, Provider};

/// What `ami` must be.
const AMI_FORM: &str = "ami must be a string or a table of one AMI per architecture: { x86_64 = \"ami-...\", arm64 = \"ami-...\" }";

impl Checker {
    /// `ami = { x86_64 = "...", arm64 = "..." }`: an AMI per architecture,
    /// each key one of [`AMI_KEYS`]; an empty table, an unknown key or a
    /// value that is not a string refused.
    fn ami_table(&mut self, v: &Spanned<DeValue>) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let DeValue::Table(t) = v.get_ref() else {
            return out;
        };
        if t.is_empty() {
            self.say(v, format!("ami: the table is empty; {AMI_FORM}"));
        }
        for (k, av) in t.iter() {
            let arch = k.get_ref().to_string();
            if !AMI_KEYS.contains(&arch.as_str()) {
                let shown: String = arch.chars().take(64).collect();
                self.say(
                    k,
                    format!(
                        "ami: unknown architecture '{}': want {}",
                        shown.escape_debug(),
                        AMI_KEYS.join(" or ")
                    ),
                );
                continue;
            }
            if let Some(id) = self.string(&format!("ami.{arch}"), av) {
                out.insert(arch, id);
            }
        }
        out
    }

    /// Reads `key` into `m` if it is one of the machine settings a pool and
    /// an EC2 run share; false if it isn't one.
    pub(super) fn machine_key(
        &mut self,
        key: &str,
        v: &Spanned<DeValue>,
        m: &mut MachineSettings,
        seen: &mut Seen,
    ) -> bool {
        match key {
            "provider" => match self.string(key, v).as_deref() {
                Some("local") => m.provider = Provider::Local,
                Some("ec2") => m.provider = Provider::Ec2,
                Some(other) => self.say(
                    v,
                    format!("bad provider '{other}': want \"local\" or \"ec2\""),
                ),
                None => {}
            },
            "locations" => {
                m.locations = self.strings(key, v, true, "strings");
            }
            "ami" => {
                seen.ami = true;
                seen.ec2_lines.push(self.line(v.span().start));
                match v.get_ref() {
                    DeValue::Table(_) => m.amis = self.ami_table(v),
                    DeValue::String(_) => m.ami = self.string(key, v),
                    _ => self.say(v, AMI_FORM),
                }
            }
            "instance_profile" | "region" => {
                seen.ec2_lines.push(self.line(v.span().start));
                let value = self.string(key, v);
                match key {
                    "instance_profile" => m.instance_profile = value,
                    _ => m.region = value,
                }
            }
            "security_groups" => {
                seen.ec2_lines.push(self.line(v.span().start));
                m.security_groups = self.strings(key, v, false, "security group ids");
            }
            "capacity" => match v.get_ref() {
                DeValue::Table(t) => {
                    seen.capacity_at = Some(self.line(v.span().start));
                    for (ck, cv) in t.iter() {
                        let loc = ck.get_ref().to_string();
                        if !self.storable("capacity: a location", ck, &loc, MAX_SHORT_BYTES) {
                            continue;
                        }
                        if let Some(n) =
                            self.integer(&format!("capacity.{loc}"), cv, 0, MAX_CAPACITY)
                        {
                            m.capacity.insert(loc, n as i32);
                        }
                    }
                }
                _ => self.say(v, "capacity must be a table of location = machines"),
            },
            _ => return false,
        }
        true
    }

    /// The checks the machine settings of `what` (at `at`) must pass:
    /// ec2 settings only with the ec2 provider, which needs an ami; capacity
    /// only with the local one, naming its locations and `types`.
    pub(super) fn machine_checks(
        &mut self,
        at: &Spanned<impl Sized>,
        what: &str,
        m: &MachineSettings,
        types: &[String],
        seen: Seen,
    ) {
        if m.provider != Provider::Ec2 {
            for line in seen.ec2_lines {
                self.problems.push(Problem {
                    line,
                    message: "ami, instance_profile, security_groups and region are settings of the ec2 provider".into(),
                });
            }
        } else if m.ami.is_none() && m.amis.is_empty() && !seen.ami {
            self.say(at, format!("{what}: the ec2 provider needs an ami"));
        }
        if let Some(line) = seen.capacity_at {
            if m.provider != Provider::Local {
                self.problems.push(Problem {
                    line,
                    message: "capacity is a setting of the local provider".into(),
                });
            }
            for key in m.capacity.keys() {
                // LOCATION, or TYPE@LOCATION for one type there.
                let (ty, loc) = key
                    .split_once('@')
                    .map_or((None, key.as_str()), |(t, l)| (Some(t), l));
                if !m.locations.iter().any(|l| l == loc) {
                    self.problems.push(Problem {
                        line,
                        message: format!("capacity names '{loc}', which is not in locations"),
                    });
                }
                if let Some(ty) = ty
                    && !types.iter().any(|t| t == ty)
                {
                    self.problems.push(Problem {
                        line,
                        message: format!("capacity names type '{ty}', which is not in types"),
                    });
                }
            }
        }
    }
}
