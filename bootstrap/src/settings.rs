//! The `[bootstrap]` table of the node's settings, with its `[bootstrap.contact_point]` sub-table:
//! the keys, their defaults (the [`Default`] impls, the only place they are written) and the
//! checks between them.
//!
//! Durations are written as text (`"5s"`, `"500ms"`); `contact_point.fallback_port` is a port
//! number or `""` for this node's management port.

use std::time::Duration;

use convoke_discovery::Lookup;
use convoke_membership::config::text;
use serde::{Deserialize, Serialize};

/// `[bootstrap]`: forming a cluster without a seed list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BootstrapSettings {
    /// Whether to bootstrap when there are no seed nodes. The caller decides whether to run the
    /// coordinator; the coordinator itself does not read this.
    pub enabled: bool,
    /// The service to look up; `""` means the cluster's system name (see
    /// [`BootstrapSettings::effective_service_name`]).
    pub service_name: String,
    /// The namespace of the service; appended to the service name when set.
    pub service_namespace: String,
    /// The port name of the lookup (SRV / Kubernetes named port); `""` = none.
    pub port_name: String,
    /// The protocol of the lookup (SRV); `""` = none.
    pub protocol: String,
    /// Contact points that must have answered before a new cluster is formed.
    pub required_contact_point_nr: usize,
    /// How long the discovered set must be unchanged before a new cluster is formed.
    #[serde(with = "text::duration")]
    pub stable_margin: Duration,
    /// Whether every discovered contact point must have answered before a new cluster is formed.
    pub contact_with_all_contact_points: bool,
    /// Whether this node may form a new cluster at all.
    pub new_cluster_enabled: bool,
    /// Base interval between discovery lookups.
    #[serde(with = "text::duration")]
    pub discovery_interval: Duration,
    /// The cap of the lookup backoff after failures (jitter comes on top).
    #[serde(with = "text::duration")]
    pub discovery_backoff_max: Duration,
    /// Jitter factor of the lookup interval (0.2 = up to 20 % longer).
    pub discovery_backoff_random_factor: f64,
    /// The timeout of one lookup.
    #[serde(with = "text::duration")]
    pub resolve_timeout: Duration,
    /// `[bootstrap.contact_point]`: probing the discovered contact points.
    pub contact_point: ContactPointSettings,
}

impl Default for BootstrapSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            service_name: String::new(),
            service_namespace: String::new(),
            port_name: String::new(),
            protocol: "tcp".into(),
            required_contact_point_nr: 2,
            stable_margin: Duration::from_secs(5),
            contact_with_all_contact_points: true,
            new_cluster_enabled: true,
            discovery_interval: Duration::from_secs(1),
            discovery_backoff_max: Duration::from_secs(15),
            discovery_backoff_random_factor: 0.2,
            resolve_timeout: Duration::from_secs(3),
            contact_point: ContactPointSettings::default(),
        }
    }
}

/// `[bootstrap.contact_point]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContactPointSettings {
    /// The port probed when discovery gives none, and the port kept by
    /// [`filter_on_fallback_port`](Self::filter_on_fallback_port); `None` (written `""`) = this
    /// node's management port (see [`ContactPointSettings::effective_fallback_port`]).
    #[serde(with = "text::opt_port")]
    pub fallback_port: Option<u16>,
    /// Without a port name, keep only the fallback port of hosts listed with several ports.
    pub filter_on_fallback_port: bool,
    /// A contact point that has not answered for this long is given up until the next lookup.
    #[serde(with = "text::duration")]
    pub probing_failure_timeout: Duration,
    /// Interval between probes of one contact point.
    #[serde(with = "text::duration")]
    pub probe_interval: Duration,
    /// Jitter factor of the probe interval.
    pub probe_interval_jitter: f64,
    /// The timeout of one probe request; strictly shorter than `probing_failure_timeout`, so one
    /// slow answer does not end probing (unlike Pekko #209).
    #[serde(with = "text::duration")]
    pub probe_timeout: Duration,
    /// A PEM CA certificate trusted when probing over HTTPS; `""` = the system roots. The caller
    /// reads the file and hands its bytes to [`HttpProber::new`](crate::HttpProber::new).
    pub ca_path: String,
}

impl Default for ContactPointSettings {
    fn default() -> Self {
        Self {
            fallback_port: None,
            filter_on_fallback_port: true,
            probing_failure_timeout: Duration::from_secs(3),
            probe_interval: Duration::from_secs(1),
            probe_interval_jitter: 0.2,
            probe_timeout: Duration::from_secs(1),
            ca_path: String::new(),
        }
    }
}

impl ContactPointSettings {
    /// The fallback port in effect: [`fallback_port`](Self::fallback_port), or this node's
    /// management port when it is unset. The bootstrap machine resolves it once, here.
    pub fn effective_fallback_port(&self, management_port: u16) -> u16 {
        self.fallback_port.unwrap_or(management_port)
    }
}

impl BootstrapSettings {
    /// The name looked up: `service_name` (or `system_name` lower-cased, with spaces and
    /// underscores as dashes), then `.service_namespace` when set.
    pub fn effective_service_name(&self, system_name: &str) -> String {
        let base = if self.service_name.is_empty() {
            system_name.to_lowercase().replace([' ', '_'], "-")
        } else {
            self.service_name.clone()
        };
        if self.service_namespace.is_empty() {
            base
        } else {
            format!("{base}.{}", self.service_namespace)
        }
    }

    /// The discovery lookup of a node whose cluster is named `system_name`: the effective service
    /// name, and the port name and protocol when they are not `""`.
    pub fn lookup(&self, system_name: &str) -> Lookup {
        let non_empty = |s: &String| Some(s.clone()).filter(|s| !s.is_empty());
        Lookup {
            service_name: self.effective_service_name(system_name),
            port_name: non_empty(&self.port_name),
            protocol: non_empty(&self.protocol),
        }
    }

    /// The lookup backoff after `failures` consecutive failed lookups, before jitter:
    /// `min(discovery_backoff_max, discovery_interval × 2^failures)`.
    pub fn backoff(&self, failures: u32) -> Duration {
        let factor = 2u32.saturating_pow(failures.min(30));
        self.discovery_interval.saturating_mul(factor).min(self.discovery_backoff_max)
    }

    /// Checks the values and the relations between them.
    ///
    /// # Errors
    /// The first offending setting, by its dotted key: a probe timeout not shorter than the
    /// probing failure timeout, a backoff cap below the interval, a jitter factor outside 0..=10,
    /// or a required contact point number of 0.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        let invalid = |key: &'static str, value: String, expected: String| {
            Err(InvalidSetting { key, value, expected })
        };
        let cp = &self.contact_point;
        if cp.probe_timeout >= cp.probing_failure_timeout {
            return invalid(
                "bootstrap.contact_point.probe_timeout",
                format!("{:?}", cp.probe_timeout),
                format!(
                    "shorter than bootstrap.contact_point.probing_failure_timeout ({:?})",
                    cp.probing_failure_timeout
                ),
            );
        }
        if self.discovery_backoff_max < self.discovery_interval {
            return invalid(
                "bootstrap.discovery_backoff_max",
                format!("{:?}", self.discovery_backoff_max),
                format!("at least bootstrap.discovery_interval ({:?})", self.discovery_interval),
            );
        }
        for (key, v) in [
            ("bootstrap.discovery_backoff_random_factor", self.discovery_backoff_random_factor),
            ("bootstrap.contact_point.probe_interval_jitter", cp.probe_interval_jitter),
        ] {
            if !(0.0..=10.0).contains(&v) {
                return invalid(key, v.to_string(), "a factor between 0 and 10".into());
            }
        }
        if self.required_contact_point_nr == 0 {
            return invalid(
                "bootstrap.required_contact_point_nr",
                "0".into(),
                "a number of contact points of at least 1".into(),
            );
        }
        Ok(())
    }
}

/// A bootstrap setting that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{key} = {value}: expected {expected}")]
pub struct InvalidSetting {
    /// The dotted key of the node's settings (`bootstrap.…`).
    pub key: &'static str,
    /// The value given.
    pub value: String,
    /// What would be accepted.
    pub expected: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from_toml(text: &str) -> Result<BootstrapSettings, toml::de::Error> {
        toml::from_str(text)
    }

    #[test]
    fn an_empty_table_is_the_defaults_and_they_are_valid() {
        let s = from_toml("").unwrap();
        assert_eq!(s, BootstrapSettings::default());
        assert_eq!(s.validate(), Ok(()));
        assert_eq!(s.contact_point.fallback_port, None);
    }

    #[test]
    fn durations_and_the_fallback_port_are_read_from_text() {
        let s = from_toml(
            r#"
            stable_margin = "1500ms"
            resolve_timeout = "2s"
            [contact_point]
            fallback_port = 9000
            probe_timeout = "500ms"
            "#,
        )
        .unwrap();
        assert_eq!(s.stable_margin, Duration::from_millis(1500));
        assert_eq!(s.resolve_timeout, Duration::from_secs(2));
        assert_eq!(s.contact_point.fallback_port, Some(9000));
        assert_eq!(s.contact_point.effective_fallback_port(8558), 9000);
        assert_eq!(s.contact_point.probe_timeout, Duration::from_millis(500));

        let unset = from_toml("[contact_point]\nfallback_port = \"\"").unwrap();
        assert_eq!(unset.contact_point.fallback_port, None);
        assert_eq!(unset.contact_point.effective_fallback_port(8558), 8558);
    }

    #[test]
    fn unknown_keys_and_bad_durations_are_rejected() {
        let e = from_toml("stable_margn = \"5s\"").unwrap_err();
        assert!(e.to_string().contains("stable_margn"), "{e}");
        let e = from_toml("[contact_point]\nprobe_timeot = \"5s\"").unwrap_err();
        assert!(e.to_string().contains("probe_timeot"), "{e}");
        assert!(from_toml("stable_margin = \"soon\"").is_err());
    }

    #[test]
    fn the_settings_read_back_what_they_write() {
        let s = BootstrapSettings {
            stable_margin: Duration::from_millis(1500),
            contact_point: ContactPointSettings {
                fallback_port: Some(9000),
                ..ContactPointSettings::default()
            },
            ..BootstrapSettings::default()
        };
        for s in [BootstrapSettings::default(), s] {
            let text = toml::to_string(&s).unwrap();
            assert_eq!(from_toml(&text).unwrap(), s, "{text}");
        }
    }

    #[test]
    fn the_service_name_defaults_to_the_system_name() {
        let mut s = BootstrapSettings::default();
        assert_eq!(s.effective_service_name("My_Cluster system"), "my-cluster-system");
        s.service_namespace = "ns".into();
        assert_eq!(s.effective_service_name("convoke"), "convoke.ns");
        s.service_name = "svc".into();
        assert_eq!(s.effective_service_name("convoke"), "svc.ns");
        let lookup = s.lookup("convoke");
        assert_eq!(lookup.service_name, "svc.ns");
        assert_eq!(lookup.port_name, None);
        assert_eq!(lookup.protocol.as_deref(), Some("tcp"));
    }

    #[test]
    fn the_backoff_doubles_up_to_the_cap() {
        let s = BootstrapSettings::default();
        let secs: Vec<u64> = (0..6).map(|f| s.backoff(f).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 15, 15]);
        assert_eq!(s.backoff(u32::MAX), Duration::from_secs(15));
    }

    #[test]
    fn invalid_settings_are_named_by_key() {
        let check = |edit: fn(&mut BootstrapSettings), key: &str, value: &str, expected: &str| {
            let mut s = BootstrapSettings::default();
            edit(&mut s);
            let e = s.validate().unwrap_err();
            assert_eq!((e.key, e.value.as_str()), (key, value), "{e}");
            assert!(e.expected.starts_with(expected), "{e}");
        };
        check(
            |s| s.contact_point.probe_timeout = Duration::from_secs(3),
            "bootstrap.contact_point.probe_timeout",
            "3s",
            "shorter than bootstrap.contact_point.probing_failure_timeout (3s)",
        );
        check(
            |s| s.discovery_backoff_max = Duration::from_millis(500),
            "bootstrap.discovery_backoff_max",
            "500ms",
            "at least bootstrap.discovery_interval (1s)",
        );
        check(
            |s| s.discovery_backoff_random_factor = -0.1,
            "bootstrap.discovery_backoff_random_factor",
            "-0.1",
            "a factor between 0 and 10",
        );
        check(
            |s| s.contact_point.probe_interval_jitter = f64::NAN,
            "bootstrap.contact_point.probe_interval_jitter",
            "NaN",
            "a factor between 0 and 10",
        );
        check(
            |s| s.required_contact_point_nr = 0,
            "bootstrap.required_contact_point_nr",
            "0",
            "a number of contact points of at least 1",
        );
    }
}
