//! The EC2 provider: a machine is an instance, made by RunInstances from the
//! AMI of the type's architecture with the boot script as user-data, tagged
//! `Name`, `orca-pool` and `orca-stack` (instance and volumes); found by
//! those tags; deleted by TerminateInstances. A type's architectures are
//! DescribeInstanceTypes', an AMI's DescribeImages' (each cached for the
//! provider's life; a failed read is asked again): a type is never launched
//! from an AMI of another architecture ([`crate::config::arch::fit`],
//! checked again by the make itself). The client token of a make is the machine's name and this
//! stack's id, so a retried RunInstances whose answer was lost can't make a
//! second instance.

use std::collections::HashMap;

use super::{Listed, Made, Make, MakeError, Provider};
use crate::aws::{Client, Ec2Error, Launch};
use crate::config::arch::{self, Ami, Fit};
use crate::config::{MachineSettings, Market};

/// One region's EC2.
pub struct Ec2 {
    client: Client,
    /// Each type's architectures (EC2's names), as DescribeInstanceTypes
    /// told them.
    type_arches: HashMap<String, Vec<String>>,
    /// Each AMI's architecture, as DescribeImages told it.
    image_arches: HashMap<String, String>,
    /// This pass's instances of the stack (one DescribeInstances for every
    /// pool), or why they couldn't be listed: by stack id.
    listed: Option<(String, Result<Vec<crate::aws::Instance>, String>)>,
}

/// The ClientToken of making machine `name` in `location`: the same for a
/// retry of that very request (EC2 answers it with the instance it made),
/// another for another location (a token reused with other parameters is
/// refused), and within EC2's 64 characters whatever the pool's name.
pub fn client_token(stack: &str, name: &str, location: &str) -> String {
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        format!("{name}\0{location}").as_bytes(),
    );
    let hash: String = digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("orca-{stack}-{hash}")
}

/// `s` in single quotes for sh.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The user-data a machine boots with: its settings exported, then its
/// script (the same as every provider's).
pub fn user_data(env: &[(String, String)], script: &str) -> String {
    let mut out = String::from("#!/bin/sh\n# orca machine: its script with its settings.\n");
    // Runs on an EC2 instance may not reach its metadata service (the
    // scripts reject ORCA_RUN_AS's packets to it with iptables).
    out.push_str("export ORCA_BLOCK_METADATA=1\n");
    // Runs there as uids of their own when the scheduler's are.
    let var = crate::secrets::run_uids::RUN_UIDS_VAR;
    if let Some(range) = std::env::var(var).ok().filter(|r| !r.trim().is_empty()) {
        out.push_str(&format!("export {var}={}\n", sh_quote(&range)));
    }
    for (k, v) in env {
        out.push_str(&format!("export {k}={}\n", sh_quote(v)));
    }
    out.push_str(script);
    out
}

impl Ec2 {
    /// The provider for `region` (else the AWS chain's region).
    pub fn new(region: Option<&str>) -> Result<Ec2, String> {
        Ok(Ec2 {
            client: Client::new(region)?,
            type_arches: HashMap::new(),
            image_arches: HashMap::new(),
            listed: None,
        })
    }
}

impl Provider for Ec2 {
    fn begin_pass(&mut self) {
        self.listed = None;
    }

    fn until(&mut self, deadline: Option<std::time::Instant>) {
        self.client.until(deadline);
    }

    fn region(&self) -> Option<String> {
        Some(self.client.region.clone())
    }

    fn fit(&mut self, type_: &str, settings: &MachineSettings) -> Result<Fit, String> {
        let type_arches = match self.type_arches.get(type_) {
            Some(a) => a.clone(),
            None => {
                let found = self
                    .client
                    .architectures(type_)
                    .map_err(|e| e.to_string())?;
                self.type_arches.insert(type_.to_string(), found.clone());
                found
            }
        };
        let given = arch::amis_of(settings.ami.as_deref(), &settings.amis);
        let mut amis = Vec::with_capacity(given.len());
        for (key, id) in given {
            let told = match self.image_arches.get(id) {
                Some(a) => Ok(a.clone()),
                None => match self.client.image_architecture(id) {
                    Ok(a) => Ok(a),
                    // EC2's answer that there is no such AMI (here): a
                    // fact about it, which skips the types only it fits.
                    Err(Ec2Error::Refused(code, m)) if code.starts_with("InvalidAMIID") => {
                        Err(format!("{code}: {m}"))
                    }
                    // No answer, or auth: nothing is known, nothing skipped.
                    Err(e) => return Err(format!("DescribeImages {id}: {e}")),
                },
            };
            if let Ok(a) = &told {
                self.image_arches.insert(id.to_string(), a.clone());
            }
            amis.push(Ami {
                key,
                id,
                arch: told,
            });
        }
        Ok(arch::fit(type_, &type_arches, &amis))
    }

    fn make(&mut self, m: &Make) -> Result<Made, MakeError> {
        // The AMI of the type's architecture, never another (cached: the
        // caller asked the same just before).
        let ami = match self.fit(m.type_, m.settings) {
            Ok(Fit::Launch { ami, .. }) => ami,
            Ok(Fit::Skip(why)) | Err(why) => return Err(MakeError::Failed(why)),
        };
        let ami = ami.as_str();
        let script = user_data(m.env, m.script);
        let token = client_token(m.stack, m.name, m.location);
        let tags = [
            ("Name", m.name),
            ("orca-pool", m.group),
            ("orca-stack", m.stack),
        ];
        let launch = Launch {
            ami,
            type_: m.type_,
            location: m.location,
            instance_profile: m.settings.instance_profile.as_deref(),
            security_groups: &m.settings.security_groups,
            user_data: &script,
            tags: &tags,
            client_token: &token,
            spot: (m.market == Market::Spot).then_some(m.max_price),
        };
        self.client
            .run_instance(&launch)
            .map(|(id, address)| Made { id, address })
            .map_err(|e| match e {
                Ec2Error::Capacity(..) => MakeError::NoCapacity(e.to_string()),
                other => MakeError::Failed(other.to_string()),
            })
    }

    fn list(&mut self, pool: &str, stack: &str) -> Result<Vec<Listed>, String> {
        if let Some((s, all)) = &self.listed
            && s == stack
        {
            return Ok(all
                .as_ref()
                .map_err(Clone::clone)?
                .iter()
                .filter(|i| i.pool == pool)
                .map(|i| Listed {
                    id: i.id.clone(),
                    name: i.name.clone(),
                })
                .collect());
        }
        let filters = [
            ("tag:orca-stack", vec![stack.to_string()]),
            (
                "instance-state-name",
                ["pending", "running", "stopping", "stopped"]
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
            ),
        ];
        // A failure too is the pass's answer: not asked again per pool.
        let all = self.client.describe(&filters).map_err(|e| e.to_string());
        self.listed = Some((stack.to_string(), all));
        self.list(pool, stack)
    }

    fn delete(&mut self, id: &str, _name: &str) -> Result<(), String> {
        self.client.terminate(id).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOOT_SCRIPT: &str = "#!/bin/sh\necho boot\n";

    #[test]
    fn client_tokens_differ_by_location_and_fit_ec2s_limit() {
        let long = "p".repeat(64);
        let a = client_token("0123456789ab", &format!("orca-{long}-12345"), "subnet-a");
        let b = client_token("0123456789ab", &format!("orca-{long}-12345"), "subnet-b");
        assert_ne!(a, b);
        assert!(a.len() <= 64, "{a}");
        assert_eq!(
            a,
            client_token("0123456789ab", &format!("orca-{long}-12345"), "subnet-a")
        );
    }

    #[test]
    fn user_data_exports_quoted_settings_then_the_boot_script() {
        let ud = user_data(
            &[
                ("ORCA_POOL".into(), "p".into()),
                ("ORCA_TOKEN".into(), "r:it's".into()),
            ],
            BOOT_SCRIPT,
        );
        assert!(ud.starts_with("#!/bin/sh\n"));
        assert!(ud.contains("export ORCA_POOL='p'\n"));
        assert!(ud.contains("export ORCA_TOKEN='r:it'\\''s'\n"));
        assert!(ud.contains("export ORCA_BLOCK_METADATA=1\n"));
        assert!(ud.ends_with(BOOT_SCRIPT));
    }
}
