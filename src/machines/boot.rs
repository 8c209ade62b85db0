//! Booting a pool machine as a worker: the boot script (`scripts/boot.sh`,
//! the same for every provider) and the settings it gets, as a provider
//! passes them (the local provider: the environment; EC2: user-data).

/// The boot script, embedded after the machine prelude
/// (`scripts/machine-prelude.sh`: the token file, `ORCA_RUN_AS`, the
/// metadata block), which every machine and instance runs first.
pub const BOOT_SCRIPT: &str = concat!(
    include_str!("../../scripts/machine-prelude.sh"),
    include_str!("../../scripts/boot.sh")
);

/// What a machine boots with: its pool, name, credentials and the database.
pub struct Boot {
    /// `ORCA_POOL`.
    pub pool: String,
    /// `ORCA_MACHINE`: its name.
    pub machine: String,
    /// `ORCA_TOKEN`: its credentials (secret: never log this).
    pub token: String,
    /// `ORCA_DATABASE_URL`: where the database is, without user or password.
    pub database_url: String,
}

impl Boot {
    /// The settings as environment variables.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("ORCA_POOL".into(), self.pool.clone()),
            ("ORCA_MACHINE".into(), self.machine.clone()),
            ("ORCA_TOKEN".into(), self.token.clone()),
            ("ORCA_DATABASE_URL".into(), self.database_url.clone()),
        ]
    }
}

/// Where a machine's or instance's process (`who`: "worker", "pool-next")
/// reaches the database: `ORCA_DATABASE_URL` with the credentials of
/// `ORCA_TOKEN`. The error never shows the token.
/// With `ORCA_TOKEN_FILE` set (the scripts set it), the boot token is
/// replaced at the first login and the file keeps the live secret
/// (`crate::secrets::Login`).
pub fn own_target(who: &str) -> Result<crate::db::Target, String> {
    let login = crate::secrets::Login::from_env(who)?;
    let app = format!("orca {who} {}", login.role);
    Ok(crate::db::Target::from_env()?
        .with_login(std::sync::Arc::new(login))
        .with_application_name(&app))
}

/// The database URL machines get: `ORCA_POOL_DATABASE_URL` if set (machines
/// may reach the database by another address), else `ORCA_DATABASE_URL`;
/// either way without its user and password, since a machine logs in with
/// its own credentials.
pub fn machine_database_url() -> Result<String, String> {
    let url = std::env::var("ORCA_POOL_DATABASE_URL")
        .or_else(|_| std::env::var("ORCA_DATABASE_URL"))
        .map_err(|_| "ORCA_DATABASE_URL is not set".to_string())?;
    Ok(without_credentials(&url))
}

/// `url` without a user or password: `postgres://u:p@h/db` → `postgres://h/db`,
/// and `user=`/`password=` dropped from a query string or a key=value string.
pub fn without_credentials(url: &str) -> String {
    let drop_key = |kv: &str| {
        let key = kv.split('=').next().unwrap_or("").trim();
        key == "user" || key == "password"
    };
    if let Some(u) = crate::url::split(url) {
        let query: Vec<&str> = u
            .query
            .map(|q| q.split('&').filter(|kv| !drop_key(kv)).collect())
            .unwrap_or_default();
        let mut out = format!("{}://{}{}", u.scheme, u.host, u.path);
        if !query.is_empty() {
            out.push('?');
            out.push_str(&query.join("&"));
        }
        out
    } else {
        url.split_whitespace()
            .filter(|kv| !drop_key(kv))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ec2_user_data_is_the_settings_then_the_prelude_then_the_boot_script() {
        let ud = crate::providers::ec2::user_data(&[("ORCA_POOL".into(), "p".into())], BOOT_SCRIPT);
        assert!(ud.starts_with("#!/bin/sh\n"));
        assert!(ud.contains("export ORCA_POOL='p'\n"));
        assert!(ud.ends_with(BOOT_SCRIPT));
        let prelude = include_str!("../../scripts/machine-prelude.sh");
        assert!(BOOT_SCRIPT.starts_with(prelude));
        assert!(BOOT_SCRIPT.ends_with(include_str!("../../scripts/boot.sh")));
    }

    #[test]
    fn credentials_are_dropped_from_every_form() {
        assert_eq!(
            without_credentials("postgres://orca:s3cret@db.internal:5433/orca?sslmode=require"),
            "postgres://db.internal:5433/orca?sslmode=require"
        );
        assert_eq!(
            without_credentials("postgresql://h/db?user=a&password=b&sslmode=disable"),
            "postgresql://h/db?sslmode=disable"
        );
        assert_eq!(
            without_credentials("host=h user=a password=b dbname=orca"),
            "host=h dbname=orca"
        );
        assert_eq!(without_credentials("postgres://h"), "postgres://h");
    }
}
