//! Where settings come from and how the layers are read: defaults, then a TOML file, then
//! `CONVOKE_*` environment variables, then `--set` overrides, later wins (layered with figment).
//!
//! Most tables are one type each and deserialize with serde's `deny_unknown_fields`. Two tables
//! are shared by a library type and the runtime — `[cluster]` (the membership core's `Config`
//! beside the node's own keys) and `[cluster.split_brain_resolver.lease_majority]` (the core's
//! strategy settings beside the Kubernetes location of the lease) — so each part is extracted from
//! the same table on its own ([`part`]), and [`known_keys_only`] refuses the keys neither has.
//! serde's `flatten` would do it in one go, but loses the key of a bad value.

use std::collections::BTreeSet;
use std::path::Path;

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::error::{from_figment, origin, unknown_key};
use super::{ADMIN_ENV_VARS, ENV_PREFIX, SettingsError};

/// Where the settings come from, in increasing precedence.
#[derive(Clone, Debug, Default)]
pub struct Sources<'a> {
    /// A TOML file (must exist when given).
    pub file: Option<&'a Path>,
    /// Whether to read `CONVOKE_*` environment variables (`CONVOKE_CLUSTER__PORT=25521` sets
    /// `cluster.port`; `__` separates levels).
    pub env: bool,
    /// `--set KEY=VALUE` overrides.
    pub sets: Vec<String>,
}

/// The layers of `sources` over `defaults`.
///
/// # Errors
/// A missing file or a malformed `--set`.
pub(super) fn layered(
    defaults: &toml::Table,
    sources: &Sources<'_>,
) -> Result<Figment, SettingsError> {
    let mut fig = Figment::from(Serialized::defaults(defaults));
    if let Some(path) = sources.file {
        if !path.is_file() {
            return Err(SettingsError::new(
                "--config",
                path.display().to_string(),
                "an existing TOML file",
            ));
        }
        fig = fig.merge(Toml::file_exact(path));
    }
    if sources.env {
        let admin = ADMIN_ENV_VARS.map(|v| &v[ENV_PREFIX.len()..]);
        fig = fig.merge(Env::prefixed(ENV_PREFIX).ignore(&admin).split("__"));
    }
    for set in &sources.sets {
        fig = fig.merge(Toml::string(&set_to_toml(set)?));
    }
    Ok(fig)
}

/// Extracts the part of the table at `path` that `T` reads (the whole file when `path` is empty).
///
/// # Errors
/// A bad value, named by its full key and the layer it came from.
pub(super) fn part<T: DeserializeOwned>(fig: &Figment, path: &str) -> Result<T, SettingsError> {
    let fig = if path.is_empty() { fig.clone() } else { fig.focus(path) };
    fig.extract().map_err(|e| from_figment(path, e))
}

/// The keys `value` has when serialized as a table.
pub(super) fn keys_of(value: &impl Serialize) -> BTreeSet<String> {
    toml::Table::try_from(value).map(|t| t.keys().cloned().collect()).unwrap_or_default()
}

/// Refuses the keys of the table at `path` that none of its parts knows.
///
/// # Errors
/// The first unknown key, with the layer it came from.
pub(super) fn known_keys_only(
    fig: &Figment,
    path: &str,
    known: &BTreeSet<String>,
) -> Result<(), SettingsError> {
    let Ok(value) = fig.find_value(path) else { return Ok(()) };
    let Some(table) = value.as_dict() else { return Ok(()) };
    match table.keys().find(|k| !known.contains(*k)) {
        None => Ok(()),
        Some(key) => {
            let full = format!("{path}.{key}");
            let known: Vec<&str> = known.iter().map(String::as_str).collect();
            Err(unknown_key(full.clone(), &known, origin(fig.find_metadata(&full))))
        }
    }
}

/// Turns `--set cluster.port=25521` into a TOML line.
fn set_to_toml(set: &str) -> Result<String, SettingsError> {
    let Some((key, value)) = set.split_once('=') else {
        return Err(SettingsError::new(
            "--set",
            format!("{set:?}"),
            "KEY=VALUE, e.g. cluster.port=25521",
        ));
    };
    let key = key.trim();
    if key.is_empty()
        || !key
            .split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
    {
        return Err(SettingsError::new(
            "--set",
            format!("{set:?}"),
            "a dotted key like cluster.port before '='",
        ));
    }
    Ok(toml_line(key, value.trim()))
}

fn toml_line(key: &str, value: &str) -> String {
    let line = format!("{key} = {value}\n");
    if line.parse::<toml::Table>().is_ok() {
        line
    } else {
        format!("{key} = {}\n", toml::Value::String(value.to_owned()))
    }
}
