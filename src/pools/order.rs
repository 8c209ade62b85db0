//! A pool's machine as [`crate::machines::make`] makes it: its id and login
//! (`orca-<pool>-<id>`, `orca_m_<stack>_<id>`), the boot script and what it
//! boots with, its row (`sql/machine_add.sql`); each location's answer
//! counted (`orca_pool_make_attempts_total`) and a location without room
//! said.

use crate::config::{MachineSettings, Market, Pool};
use crate::db::sql;
use crate::machines::boot::{self, Boot};
use crate::machines::logins::{self, Token};
use crate::machines::make::{Order, Placed};
use crate::providers::{Made, Make, MakeError};

/// A machine for pool `pool`, of type `type_` (architecture `arch`).
pub struct PoolOrder<'a> {
    /// The pool.
    pub pool: &'a Pool,
    /// The type the walk is on.
    pub type_: &'a str,
    /// Its step's market, and spot's max price.
    pub market: Market,
    /// Spot only: the most paid an hour.
    pub max_price: Option<&'a str>,
    /// Its architecture (empty: not told, no image to match).
    pub arch: &'a str,
}

/// A machine's row, as `sql/machine_add.sql` reads it: one JSON object,
/// each field by its column's name.
#[derive(serde::Serialize)]
struct NewMachine<'a> {
    id: i64,
    pool: &'a str,
    name: &'a str,
    r#type: &'a str,
    location: &'a str,
    arch: &'a str,
    role: &'a str,
    provider_id: &'a str,
    slots: i32,
    region: Option<&'a str>,
    market: &'a str,
}

impl Order for PoolOrder<'_> {
    fn next_id(&self) -> &'static str {
        sql::MACHINE_NEXT_ID
    }

    fn names(&self, stack: &str, id: i64) -> (String, String) {
        (
            format!("orca-{}-{id}", self.pool.name),
            format!("{}{id}", logins::role_prefix(stack)),
        )
    }

    fn login_statement(&self) -> &'static str {
        sql::MACHINE_ROLE_MAKE
    }

    fn env(&self, name: &str, token: &Token) -> Result<Vec<(String, String)>, String> {
        Ok(Boot {
            pool: self.pool.name.clone(),
            machine: name.to_string(),
            token: token.reveal(),
            database_url: boot::machine_database_url()?,
        }
        .env())
    }

    fn settings(&self) -> &MachineSettings {
        &self.pool.machines
    }

    fn request<'m>(
        &'m self,
        name: &'m str,
        location: &'m str,
        stack: &'m str,
        env: &'m [(String, String)],
    ) -> Make<'m> {
        Make {
            group: &self.pool.name,
            settings: &self.pool.machines,
            name,
            type_: self.type_,
            market: self.market,
            max_price: self.max_price,
            location,
            stack,
            script: boot::BOOT_SCRIPT,
            env,
        }
    }

    fn row(&self, placed: &Placed) -> Result<serde_json::Value, String> {
        serde_json::to_value(NewMachine {
            id: placed.id,
            pool: &self.pool.name,
            name: &placed.name,
            r#type: self.type_,
            location: &placed.location,
            arch: self.arch,
            role: &placed.login,
            provider_id: &placed.made.id,
            slots: self.pool.slots,
            region: placed.region.as_deref(),
            market: self.market.as_text(),
        })
        .map_err(|e| e.to_string())
    }

    fn add_statement(&self) -> &'static str {
        sql::MACHINE_ADD
    }

    fn called(&self, name: &str) -> String {
        format!("machine {name}")
    }

    fn stops_when_late(&self) -> bool {
        true
    }

    fn answered(&self, location: &str, next: Option<&str>, made: &Result<Made, MakeError>) {
        crate::metrics::make_attempt(&self.pool.name, made.is_ok());
        if let Err(MakeError::NoCapacity(why)) = made {
            log::info!(
                "{}",
                super::say::say_no_room(&self.pool.name, self.type_, location, why, next)
            );
        }
    }
}
