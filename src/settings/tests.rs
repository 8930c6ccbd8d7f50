#![allow(clippy::result_large_err)] // figment::Jail closures return figment::Error.

use std::path::Path;
use std::time::Duration;

use figment::Jail;

use super::*;

fn load_sets(sets: &[&str]) -> Result<Settings, SettingsError> {
    Settings::load(&Sources {
        file: None,
        env: false,
        sets: sets.iter().map(|s| (*s).to_owned()).collect(),
    })
}

#[test]
fn defaults_match_the_documented_interface() {
    let s = Settings::default();
    assert_eq!(s.cluster.port, 25520);
    assert_eq!(s.management.port, 8558);
    assert_eq!(s.cluster.system_name, "convoke");
    assert_eq!(s.cluster.split_brain_resolver.active_strategy, "keep-majority");
    assert!(s.management.read_only);
    assert_eq!(s.bootstrap.required_contact_point_nr, 2);
    s.validate().unwrap();
    let core = s.core_config().unwrap();
    assert_eq!(core.allow_weakly_up_members, Some(Duration::from_secs(7)));
}

#[test]
fn later_layers_win_file_then_env_then_set() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "node.toml",
            "[cluster]\nport = 1000\nhostname = \"file\"\nroles = [\"a\"]\n",
        )?;
        jail.set_env("CONVOKE_CLUSTER__PORT", "2000");
        jail.set_env("CONVOKE_CLUSTER__FAILURE_DETECTOR__THRESHOLD", "9.5");
        let s = Settings::load(&Sources {
            file: Some(Path::new("node.toml")),
            env: true,
            sets: vec!["cluster.port=3000".into()],
        })
        .map_err(|e| e.to_string())?;
        assert_eq!(s.cluster.port, 3000);
        assert_eq!(s.cluster.hostname, "file");
        assert_eq!(s.cluster.roles, ["a"]);
        assert!((s.cluster.failure_detector.threshold - 9.5).abs() < f64::EPSILON);
        Ok(())
    });
}

#[test]
fn set_takes_toml_values_and_bare_strings() {
    let s = load_sets(&[
        "cluster.seed_nodes=[\"convoke://convoke@127.0.0.1:25520\"]",
        "cluster.hostname=10.0.0.7",
        "cluster.gossip_interval=500ms",
        "cluster.allow_weakly_up_members=off",
    ])
    .unwrap();
    assert_eq!(s.cluster.seed_nodes, ["convoke://convoke@127.0.0.1:25520"]);
    assert_eq!(s.cluster.hostname, "10.0.0.7");
    assert_eq!(s.cluster.gossip_interval.0, Duration::from_millis(500));
    assert_eq!(s.core_config().unwrap().allow_weakly_up_members, None);
}

#[test]
fn every_bad_value_names_its_key() {
    let cases: &[(&str, &str)] = &[
        ("cluster.nonsense=1", "cluster.nonsense"),
        ("cluster.port=\"abc\"", "cluster.port"),
        ("cluster.port=70000", "cluster.port"),
        ("cluster.gossip_interval=\"-1s\"", "cluster.gossip_interval"),
        ("cluster.gossip_interval=5", "cluster.gossip_interval"),
        ("cluster.failure_detector.threshold=0", "cluster.failure_detector.threshold"),
        ("cluster.failure_detector.threshold=-2.5", "cluster.failure_detector.threshold"),
        (
            "cluster.split_brain_resolver.active_strategy=\"keep-everyone\"",
            "cluster.split_brain_resolver.active_strategy",
        ),
        ("cluster.seed_nodes=[\"http://x\"]", "cluster.seed_nodes[0]"),
        ("cluster.system_name=\"a b\"", "cluster.system_name"),
        (
            "management.health_checks.ready_states=[\"Ready\"]",
            "management.health_checks.ready_states",
        ),
        ("discovery.method=\"zookeeper\"", "discovery.method"),
        ("bootstrap.stable_margin=\"soon\"", "bootstrap.stable_margin"),
        ("management.bind_port=\"x\"", "management.bind_port"),
        ("cluster.transport.max_frame_size=0", "cluster.transport.max_frame_size"),
        ("nonsense.key=1", "nonsense"),
        ("cluster.port", "--set"),
    ];
    for (set, key) in cases {
        let err = load_sets(&[set]).expect_err(set);
        assert_eq!(err.key, *key, "{set}: {err}");
        let msg = err.to_string();
        assert!(msg.contains(key) && !err.expected.is_empty(), "{set}: {msg}");
    }
}

#[test]
fn bad_environment_values_name_the_key_and_the_origin() {
    Jail::expect_with(|jail| {
        jail.set_env("CONVOKE_CLUSTER__PORT", "abc");
        let err = Settings::load(&Sources { file: None, env: true, sets: vec![] }).unwrap_err();
        assert_eq!(err.key, "cluster.port");
        assert!(err.to_string().contains("environment"), "{err}");
        Ok(())
    });
}

#[test]
fn a_missing_config_file_is_an_error() {
    let err = Settings::load(&Sources {
        file: Some(Path::new("/nonexistent/convoke.toml")),
        env: false,
        sets: vec![],
    })
    .unwrap_err();
    assert_eq!(err.key, "--config");
}

#[test]
fn the_printed_configuration_loads_back_to_the_same_settings() {
    Jail::expect_with(|jail| {
        let s = load_sets(&[
            "cluster.port=4000",
            "cluster.roles=[\"x\"]",
            "cluster.allow_weakly_up_members=off",
        ])
        .map_err(|e| e.to_string())?;
        jail.create_file("printed.toml", &s.to_toml())?;
        let back = Settings::load(&Sources {
            file: Some(Path::new("printed.toml")),
            env: false,
            sets: vec![],
        })
        .map_err(|e| e.to_string())?;
        assert_eq!(back, s);
        Ok(())
    });
}

#[test]
fn bootstrap_and_discovery_settings_are_read_and_bad_combinations_name_the_key() {
    let s = load_sets(&[
        "bootstrap.stable_margin=\"1s\"",
        "bootstrap.contact_point.probe_timeout=\"500ms\"",
        "discovery.method=\"dns\"",
        "discovery.dns.nameservers=[\"127.0.0.1:5353\"]",
        "discovery.kubernetes_api.pod_label_selector=\"role=%s\"",
    ])
    .unwrap();
    s.validate().unwrap();
    assert_eq!(s.bootstrap.stable_margin, Dur(Duration::from_secs(1)));
    assert_eq!(s.discovery.dns.nameservers, ["127.0.0.1:5353"]);
    assert_eq!(s.bootstrap.effective_service_name("My_Cluster system"), "my-cluster-system");

    let slow_probe = load_sets(&["bootstrap.contact_point.probe_timeout=\"3s\""]).unwrap();
    let e = slow_probe.validate().unwrap_err();
    assert_eq!(e.key, "bootstrap.contact_point.probe_timeout");
    assert!(e.expected.contains("probing_failure_timeout"), "{e}");

    let aggregate = load_sets(&[
        "discovery.method=\"aggregate\"",
        "discovery.aggregate.discovery_methods=[\"dns\", \"consul\"]",
    ])
    .unwrap();
    assert_eq!(aggregate.validate().unwrap_err().key, "discovery.aggregate.discovery_methods");

    let unknown = load_sets(&["discovery.dns.servers=[]"]).unwrap_err();
    assert!(unknown.to_string().contains("servers"), "{unknown}");
}
