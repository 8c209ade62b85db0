//! Where pool machines come from: a provider makes, lists (by labels) and
//! deletes machines, and says each type's architecture. `local` runs
//! machines as process groups on this host (the demo and the tests); `ec2`
//! makes EC2 instances, through the calls of [`crate::aws`].

pub mod ec2;
pub mod local;

use crate::config::arch::Fit;
use crate::config::{MachineSettings, Market};

/// A machine to make.
pub struct Make<'a> {
    /// What it belongs to (its label): a pool's name, or `ec2-runs`.
    pub group: &'a str,
    /// How it is made (AMI, profile, groups; local capacity).
    pub settings: &'a MachineSettings,
    /// Its name: `orca-<pool>-<id>`, `orca-i-<id>`.
    pub name: &'a str,
    /// The instance type.
    pub type_: &'a str,
    /// How it is bought.
    pub market: Market,
    /// Spot only: the most paid an hour (none: the provider's default).
    pub max_price: Option<&'a str>,
    /// The location.
    pub location: &'a str,
    /// This stack's id (a label beside the pool's).
    pub stack: &'a str,
    /// The script it boots (the boot script, the instance script).
    pub script: &'a str,
    /// The settings the script gets (its token among them: secret).
    pub env: &'a [(String, String)],
}

/// A machine the provider made.
#[derive(Debug, Clone)]
pub struct Made {
    /// The provider's id for it.
    pub id: String,
    /// Where other machines reach it (EC2: its private address).
    pub address: String,
}

/// A machine the provider has, found by its labels.
#[derive(Clone, Debug)]
pub struct Listed {
    /// The provider's id for it.
    pub id: String,
    /// Its name.
    pub name: String,
}

/// Why a machine was not made.
#[derive(Debug, Clone)]
pub enum MakeError {
    /// This location doesn't have the type now: try the next.
    NoCapacity(String),
    /// Anything else: nothing is made this pass.
    Failed(String),
}

/// A source of machines.
pub trait Provider {
    /// A scaler pass begins: what the provider lists may be read once for
    /// the whole pass.
    fn begin_pass(&mut self) {}
    /// From now on, no call is sent after `deadline` (it fails at once,
    /// unsent), and none waits long past it (see
    /// [`crate::aws::Client::until`]); `None`: no limit. A provider whose
    /// calls can't hang ignores it.
    fn until(&mut self, _deadline: Option<std::time::Instant>) {}
    /// Which AMI `type_` is launched from with `settings`, and the
    /// architecture (EC2's names: `x86_64`, `arm64`) it then runs; or why
    /// it is skipped (no AMI of its architectures, see
    /// [`crate::config::arch::fit`]). Err: its architectures can't be
    /// told now.
    fn fit(&mut self, type_: &str, settings: &MachineSettings) -> Result<Fit, String>;
    /// Makes a machine.
    fn make(&mut self, m: &Make) -> Result<Made, MakeError>;
    /// The machines labelled with `group` and `stack`.
    fn list(&mut self, group: &str, stack: &str) -> Result<Vec<Listed>, String>;
    /// The region its machines are made in, where that means something.
    fn region(&self) -> Option<String> {
        None
    }
    /// Deletes machine `id`, named `name` (one that is already gone is not
    /// an error; an id that now stands for another machine is left alone).
    fn delete(&mut self, id: &str, name: &str) -> Result<(), String>;
}

/// Maps an architecture as a platform names it to OCI's name.
pub fn oci_arch(name: &str) -> &str {
    match name {
        "x86_64" | "x86-64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// Maps an architecture as a platform names it to EC2's name (`x86_64`,
/// `arm64`): the AMI keys' names, and what `orca pools` shows.
pub fn ec2_arch(name: &str) -> &str {
    match name {
        "amd64" | "x86-64" => "x86_64",
        "aarch64" => "arm64",
        other => other,
    }
}
