#![allow(clippy::result_large_err)] // figment::Jail closures return figment::Error.

use std::path::Path;
use std::time::Duration;

use figment::Jail;

use convoke_membership::gossip::WallMillis;

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
    assert_eq!(s.cluster.core.system_name, "convoke");
    assert_eq!(s.cluster.core.split_brain_resolver.active_strategy, "keep-majority");
    assert!(s.management.read_only);
    assert_eq!(s.bootstrap.required_contact_point_nr, 2);
    assert_eq!(s.runtime.worker_threads, 1);
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
        assert_eq!(s.cluster.core.roles.iter().collect::<Vec<_>>(), ["a"]);
        assert!((s.cluster.core.failure_detector.threshold - 9.5).abs() < f64::EPSILON);
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
    assert_eq!(s.cluster.core.gossip_interval, Duration::from_millis(500));
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
        ("discovery.dns.nameservers=[\"dns.example\"]", "discovery.dns.nameservers"),
        (
            "discovery.kubernetes_api.token_reload_interval=\"often\"",
            "discovery.kubernetes_api.token_reload_interval",
        ),
        ("discovery.kubernetes_api.pods=1", "discovery.kubernetes_api.pods"),
        ("bootstrap.stable_margin=\"soon\"", "bootstrap.stable_margin"),
        ("management.bind_port=\"x\"", "management.bind_port"),
        ("management.limits.event_keep_alive=\"0s\"", "management.limits.event_keep_alive"),
        ("cluster.transport.max_frame_size=0", "cluster.transport.max_frame_size"),
        (
            "cluster.split_brain_resolver.lease_majority.nonsense=1",
            "cluster.split_brain_resolver.lease_majority.nonsense",
        ),
        (
            "cluster.split_brain_resolver.lease_majority.release_after=\"later\"",
            "cluster.split_brain_resolver.lease_majority.release_after",
        ),
        (
            "cluster.split_brain_resolver.lease_majority.kubernetes_api_url=1",
            "cluster.split_brain_resolver.lease_majority.kubernetes_api_url",
        ),
        ("runtime.worker_threads=0", "runtime.worker_threads"),
        ("runtime.worker_threads=1025", "runtime.worker_threads"),
        ("runtime.worker_threads=\"two\"", "runtime.worker_threads"),
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
    assert_eq!(s.bootstrap.stable_margin, Duration::from_secs(1));
    assert_eq!(s.discovery.dns.nameservers, ["127.0.0.1:5353".parse().unwrap()]);
    assert_eq!(s.bootstrap.effective_service_name("My_Cluster system"), "my-cluster-system");

    let e = load_sets(&["bootstrap.contact_point.probe_timeout=\"3s\""]).unwrap_err();
    assert_eq!(e.key, "bootstrap.contact_point.probe_timeout");
    assert!(e.expected.contains("probing_failure_timeout"), "{e}");

    let aggregate = load_sets(&[
        "discovery.method=\"aggregate\"",
        "discovery.aggregate.discovery_methods=[\"dns\", \"consul\"]",
    ])
    .unwrap_err();
    assert_eq!(aggregate.key, "discovery.aggregate.discovery_methods");

    let unknown = load_sets(&["discovery.dns.servers=[]"]).unwrap_err();
    assert!(unknown.to_string().contains("servers"), "{unknown}");
}

#[test]
fn every_split_brain_strategy_table_reaches_the_core_config() {
    let s = load_sets(&[
        "cluster.split_brain_resolver.active_strategy=\"static-quorum\"",
        "cluster.split_brain_resolver.stable_after=\"7s\"",
        "cluster.split_brain_resolver.down_all_when_unstable=\"off\"",
        "cluster.split_brain_resolver.keep_majority.role=\"km\"",
        "cluster.split_brain_resolver.static_quorum.quorum_size=3",
        "cluster.split_brain_resolver.static_quorum.role=\"sq\"",
        "cluster.split_brain_resolver.keep_oldest.down_if_alone=false",
        "cluster.split_brain_resolver.keep_oldest.role=\"ko\"",
        "cluster.split_brain_resolver.lease_majority.lease_name=\"orders-lease\"",
        "cluster.split_brain_resolver.lease_majority.acquire_lease_delay_for_minority=\"3s\"",
        "cluster.split_brain_resolver.lease_majority.release_after=\"50s\"",
        "cluster.split_brain_resolver.lease_majority.role=\"lm\"",
    ])
    .unwrap();
    let sbr = s.core_config().unwrap().split_brain_resolver;
    assert_eq!(sbr.active_strategy, "static-quorum");
    assert_eq!(sbr.stable_after, Duration::from_secs(7));
    assert_eq!(sbr.down_all_when_unstable_after(), None);
    assert_eq!(sbr.keep_majority.role, "km");
    assert_eq!((sbr.static_quorum.quorum_size, sbr.static_quorum.role.as_str()), (3, "sq"));
    assert!(!sbr.keep_oldest.down_if_alone);
    assert_eq!(sbr.keep_oldest.role, "ko");
    assert_eq!(sbr.lease_majority.effective_lease_name("convoke"), "orders-lease");
    assert_eq!(sbr.lease_majority.acquire_lease_delay_for_minority, Duration::from_secs(3));
    assert_eq!(sbr.lease_majority.release_after, Duration::from_secs(50));
    assert_eq!(sbr.lease_majority.role, "lm");
}

#[test]
fn split_brain_defaults_are_keep_majority_after_20s_with_the_documented_lease_timing() {
    let s = Settings::default();
    let sbr = &s.cluster.core.split_brain_resolver;
    assert_eq!(sbr.stable_after, Duration::from_secs(20));
    assert!(sbr.keep_oldest.down_if_alone);
    assert_eq!(sbr.static_quorum.quorum_size, 0);
    let l = &sbr.lease_majority;
    assert_eq!(l.heartbeat_interval, Duration::from_secs(12));
    assert_eq!(l.heartbeat_timeout, Duration::from_secs(120));
    assert_eq!(l.lease_operation_timeout, Duration::from_secs(5));
    assert_eq!(l.acquire_lease_delay_for_minority, Duration::from_secs(2));
    assert_eq!(l.release_after, Duration::from_secs(40));
    assert_eq!(s.lease.kubernetes_api_url, "");
    assert_eq!(
        s.lease.kubernetes_token_path,
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    );
    let core = s.core_config().unwrap().split_brain_resolver;
    assert_eq!(core.down_all_when_unstable_after(), Some(Duration::from_secs(15)));
    assert_eq!(core.lease_majority.effective_lease_name("orders"), "orders-convoke-sbr");
}

#[test]
fn active_strategy_off_turns_automatic_downing_off() {
    let s = load_sets(&["cluster.split_brain_resolver.active_strategy=\"off\""]).unwrap();
    let core = s.core_config().unwrap();
    assert!(!core.split_brain_resolver.is_active());
    let node = convoke_membership::UniqueAddress::new(
        "convoke://convoke@127.0.0.1:25520".parse().unwrap(),
        convoke_membership::Uid::new(7).unwrap(),
    );
    let cluster =
        convoke_membership::Cluster::new(core, node, std::time::Instant::now(), WallMillis(0))
            .unwrap();
    assert!(cluster.split_brain_resolver().is_none());
}

#[test]
fn lease_majority_is_accepted_with_its_lease_settings() {
    let s = load_sets(&[
        "cluster.split_brain_resolver.active_strategy=\"lease-majority\"",
        "cluster.split_brain_resolver.lease_majority.heartbeat_interval=\"1s\"",
        "cluster.split_brain_resolver.lease_majority.heartbeat_timeout=\"3s\"",
        "cluster.split_brain_resolver.lease_majority.lease_operation_timeout=\"2s\"",
        "cluster.split_brain_resolver.lease_majority.kubernetes_api_url=\"https://10.96.0.1:443\"",
        "cluster.split_brain_resolver.lease_majority.kubernetes_namespace=\"orders\"",
        "cluster.split_brain_resolver.lease_majority.kubernetes_ca_path=\"\"",
    ])
    .unwrap();
    assert_eq!(s.core_config().unwrap().split_brain_resolver.active_strategy, "lease-majority");
    let l = &s.cluster.core.split_brain_resolver.lease_majority;
    assert_eq!(l.heartbeat_timeout, Duration::from_secs(3));
    assert_eq!(s.lease.kubernetes_namespace, "orders");
}

#[test]
fn every_bad_split_brain_value_names_its_key_and_what_was_expected() {
    const P: &str = "cluster.split_brain_resolver";
    let lease = format!("{P}.active_strategy=\"lease-majority\"");
    let quorum = format!("{P}.active_strategy=\"static-quorum\"");
    let cases: Vec<(Vec<String>, String, &str)> = vec![
        (vec![quorum.clone()], format!("{P}.static_quorum.quorum_size"), "at least 1"),
        (
            vec![quorum, format!("{P}.static_quorum.quorum_size=-1")],
            format!("{P}.static_quorum.quorum_size"),
            "whole number",
        ),
        (
            vec![format!("{P}.keep_oldest.down_if_alone=\"maybe\"")],
            format!("{P}.keep_oldest.down_if_alone"),
            "true or false",
        ),
        (
            vec![format!("{P}.keep_oldest.oldest=1")],
            format!("{P}.keep_oldest.oldest"),
            "known keys",
        ),
        (
            vec![format!("{P}.lease_majority.lease_implementation=\"x\"")],
            format!("{P}.lease_majority.lease_implementation"),
            "known keys",
        ),
        (
            vec![format!("{P}.lease_majority.lease_name=\"a b\"")],
            format!("{P}.lease_majority.lease_name"),
            "without spaces",
        ),
        (
            vec![format!("{P}.lease_majority.release_after=\"soon\"")],
            format!("{P}.lease_majority.release_after"),
            "duration",
        ),
        (
            vec![lease.clone(), format!("{P}.lease_majority.heartbeat_interval=\"70s\"")],
            format!("{P}.lease_majority.heartbeat_interval"),
            "at most half of heartbeat_timeout (2m)",
        ),
        (
            vec![lease.clone(), format!("{P}.lease_majority.heartbeat_timeout=\"0s\"")],
            format!("{P}.lease_majority.heartbeat_timeout"),
            "greater than 0",
        ),
        (
            vec![lease.clone(), format!("{P}.lease_majority.lease_operation_timeout=\"2m\"")],
            format!("{P}.lease_majority.lease_operation_timeout"),
            "less than heartbeat_timeout",
        ),
        (
            vec![lease, format!("{P}.lease_majority.kubernetes_api_url=\"10.96.0.1\"")],
            format!("{P}.lease_majority.kubernetes_api_url"),
            "a URL",
        ),
    ];
    for (sets, key, expected) in cases {
        let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
        let err = load_sets(&sets).expect_err(&format!("{sets:?}"));
        assert_eq!(err.key, key, "{sets:?}: {err}");
        assert!(err.expected.contains(expected), "{sets:?}: {err}");
        assert!(!err.value.is_empty(), "{sets:?}: {err}");
    }
}

#[test]
fn split_brain_tables_load_from_a_file_and_print_back() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "node.toml",
            "[cluster.split_brain_resolver]\nactive_strategy = \"keep-oldest\"\n\n\
             [cluster.split_brain_resolver.keep_oldest]\ndown_if_alone = false\nrole = \"backend\"\n",
        )?;
        let s = Settings::load(&Sources {
            file: Some(Path::new("node.toml")),
            env: false,
            sets: vec![],
        })
        .map_err(|e| e.to_string())?;
        let ko = &s.cluster.core.split_brain_resolver.keep_oldest;
        assert!(!ko.down_if_alone);
        assert_eq!(ko.role, "backend");
        let printed = s.to_toml();
        assert!(printed.contains("[cluster.split_brain_resolver.lease_majority]"), "{printed}");
        jail.create_file("printed.toml", &printed)?;
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
fn a_node_gives_up_joining_after_60s_and_fails_alive_after_5m_outside_a_cluster_by_default() {
    let s = load_sets(&[]).unwrap();
    assert_eq!(
        s.core_config().unwrap().shutdown_after_unsuccessful_join_seed_nodes,
        Some(DEFAULT_JOIN_GIVE_UP)
    );
    assert_eq!(DEFAULT_JOIN_GIVE_UP, Duration::from_secs(60));
    assert_eq!(s.management.health_checks.join_deadline, Some(Duration::from_secs(300)));
    // The library core keeps Akka's default.
    assert_eq!(CoreConfig::default().shutdown_after_unsuccessful_join_seed_nodes, None);

    let off = load_sets(&[
        "cluster.shutdown_after_unsuccessful_join_seed_nodes=\"off\"",
        "management.health_checks.join_deadline=\"off\"",
    ])
    .unwrap();
    assert_eq!(off.cluster.core.shutdown_after_unsuccessful_join_seed_nodes, None);
    assert_eq!(off.management.health_checks.join_deadline, None);

    let err = load_sets(&["management.health_checks.join_deadline=\"0s\""]).unwrap_err();
    assert_eq!(err.key, "management.health_checks.join_deadline", "{err}");
    let err = load_sets(&["management.health_checks.join_deadline=\"soon\""]).unwrap_err();
    assert!(err.to_string().contains("management.health_checks.join_deadline"), "{err}");
}

#[test]
fn probe_paths_must_differ_and_base_paths_may_omit_the_leading_slash() {
    let s = load_sets(&["management.base_path=\"mgmt\""]).unwrap();
    assert_eq!(s.management.route_prefix(), "/mgmt");
    let err = load_sets(&["management.health_checks.startup_path=\"alive\""]).unwrap_err();
    assert_eq!(err.key, "management.health_checks", "{err}");
    let err = load_sets(&["management.health_checks.readiness_path=\"/\""]).unwrap_err();
    assert_eq!(err.key, "management.health_checks.readiness_path", "{err}");
}

#[test]
fn worker_threads_default_to_one_and_are_read_from_every_layer() {
    assert_eq!(load_sets(&[]).unwrap().runtime.worker_threads, 1);
    assert_eq!(load_sets(&["runtime.worker_threads=4"]).unwrap().runtime.worker_threads, 4);
    Jail::expect_with(|jail| {
        jail.set_env("CONVOKE_RUNTIME__WORKER_THREADS", "3");
        let s = Settings::load(&Sources { file: None, env: true, sets: Vec::new() }).unwrap();
        assert_eq!(s.runtime.worker_threads, 3);
        Ok(())
    });
}

#[test]
fn remember_entities_takes_a_flag_or_type_names_and_needs_the_store() {
    let store = ["data.enabled=true", "data.dir=\"/tmp/convoke-data\""];
    let all = load_sets(&[&store[..], &["sharding.remember_entities=true"]].concat()).unwrap();
    assert!(all.sharding.remember_entities.covers("anything"));
    let some =
        load_sets(&[&store[..], &["sharding.remember_entities=[\"cart\"]"]].concat()).unwrap();
    assert!(some.sharding.remember_entities.covers("cart"));
    assert!(!some.sharding.remember_entities.covers("counter"));
    assert_eq!(
        some.sharding.config_for("cart", None, Duration::from_secs(1)).idle_after(),
        None,
        "remembered entities are never passivated for being idle"
    );
    assert!(!Settings::default().sharding.remember_entities.any());
    let bad = load_sets(&["sharding.remember_entities=5"]).unwrap_err();
    assert_eq!(bad.key, "sharding.remember_entities");
    assert!(bad.expected.contains("true, false or a list of entity type names"), "{bad}");
    let no_store = load_sets(&["sharding.remember_entities=true"]).unwrap_err();
    assert_eq!(no_store.key, "sharding.remember_entities");
    assert!(no_store.expected.contains("data.enabled"), "{no_store}");
}
