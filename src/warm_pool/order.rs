//! An EC2 run's instance as [`crate::machines::make`] makes it: its id and
//! login (`orca-i-<id>`, `orca_i_<stack>_<id>`), the instance script and
//! what it boots with, its row (`sql/instance_add.sql`).

use serde::Serialize;

use crate::config::spec::Ec2Spec;
use crate::config::{MachineSettings, Pipeline};
use crate::db::sql;
use crate::machines::fleet;
use crate::machines::logins::Token;
use crate::machines::make::{Order, Placed};
use crate::providers::Make;
use crate::warm_pool::decide::Role;

/// The instance script, embedded after the machine prelude
/// (`scripts/machine-prelude.sh`), as [`crate::machines::boot::BOOT_SCRIPT`].
pub const INSTANCE_SCRIPT: &str = concat!(
    include_str!("../../scripts/machine-prelude.sh"),
    include_str!("../../scripts/instance.sh")
);

/// The provider label of EC2 runs' instances.
/// (A colon: no pool can have that name, so no pool takes them for its own.)
pub const GROUP: &str = "orca:ec2-runs";

/// An instance a run needs made.
pub struct Want<'a> {
    /// The run's pipeline.
    pub pipeline: &'a Pipeline,
    /// Its `[ec2]` table.
    pub ec2: &'a Ec2Spec,
    /// The run.
    pub run: i64,
    /// Its attempt.
    pub start: i32,
    /// The instance's part in it.
    pub role: Role,
    /// The head's address (`-` for the head itself, not known yet).
    pub head: &'a str,
    /// Whether it may take new code (`orca.instances.fresh_code`).
    pub fresh: bool,
    /// `ORCA_EC2_POOL_SECONDS`, which it is told.
    pub pool_seconds: f64,
}

/// A new instance's row, as `sql/instance_add.sql` reads it: one JSON
/// object, each field by its column's name.
#[derive(Serialize)]
struct NewInstance<'a> {
    instance: &'a str,
    pipeline: &'a str,
    run: i64,
    start: i32,
    role: &'a str,
    login: &'a str,
    address: &'a str,
    host: &'a str,
    provider: &'a str,
    provider_id: &'a str,
    region: Option<&'a str>,
    fresh_code: bool,
    market: &'a str,
}

impl Order for Want<'_> {
    fn next_id(&self) -> &'static str {
        sql::INSTANCE_NEXT_ID
    }

    fn names(&self, stack: &str, id: i64) -> (String, String) {
        (format!("orca-i-{id}"), format!("orca_i_{stack}_{id}"))
    }

    fn login_statement(&self) -> &'static str {
        sql::INSTANCE_ROLE_MAKE
    }

    fn env(&self, name: &str, token: &Token) -> Result<Vec<(String, String)>, String> {
        Ok(vec![
            ("ORCA_INSTANCE".to_string(), name.to_string()),
            ("ORCA_RUN".to_string(), self.run.to_string()),
            ("ORCA_START".to_string(), self.start.to_string()),
            ("ORCA_TOKEN".to_string(), token.reveal()),
            (
                "ORCA_DATABASE_URL".to_string(),
                crate::machines::boot::machine_database_url()?,
            ),
            (
                "ORCA_EC2_POOL_SECONDS".to_string(),
                self.pool_seconds.to_string(),
            ),
        ])
    }

    fn settings(&self) -> &MachineSettings {
        &self.ec2.machines
    }

    fn request<'m>(
        &'m self,
        name: &'m str,
        location: &'m str,
        stack: &'m str,
        env: &'m [(String, String)],
    ) -> Make<'m> {
        Make {
            group: GROUP,
            settings: &self.ec2.machines,
            name,
            type_: &self.ec2.type_,
            market: self.ec2.market,
            max_price: self.ec2.max_price.as_deref(),
            location,
            stack,
            script: INSTANCE_SCRIPT,
            env,
        }
    }

    fn row(&self, placed: &Placed) -> Result<serde_json::Value, String> {
        serde_json::to_value(NewInstance {
            instance: &placed.name,
            pipeline: &self.pipeline.name,
            run: self.run,
            start: self.start,
            role: self.role.as_str(),
            login: &placed.login,
            address: self.head,
            host: &placed.made.address,
            provider: fleet::stored_kind(&self.ec2.machines.provider),
            provider_id: &placed.made.id,
            region: placed.region.as_deref(),
            fresh_code: self.fresh,
            market: self.ec2.market.as_text(),
        })
        .map_err(|e| e.to_string())
    }

    fn add_statement(&self) -> &'static str {
        sql::INSTANCE_ADD
    }

    fn called(&self, name: &str) -> String {
        format!("run {}: instance {name}", self.run)
    }
}
