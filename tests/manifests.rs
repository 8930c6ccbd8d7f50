//! The Kubernetes manifests in `k8s/` checked against the code: the probes hit routes and ports
//! the node serves, the label selector kubernetes-api discovery uses matches the pod labels, every
//! environment variable is one the binary reads (`convoke run --print-config` with exactly the
//! Deployment's environment), the contact point count matches the replicas, and the RBAC verbs
//! are exactly the ones the code uses.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use convoke::management::ROUTES;
use convoke_discovery::kubernetes::{ENV_VARS, LEASE_VERBS, POD_VERBS};
use serde_json::Value;

fn manifest(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("k8s").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn deployment() -> Value {
    manifest("deployment.yaml")
}

fn container(deployment: &Value) -> &Value {
    let containers = deployment["spec"]["template"]["spec"]["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1, "one container");
    &containers[0]
}

fn strings(v: &Value) -> BTreeMap<String, String> {
    let map = v.as_object().cloned().unwrap_or_default();
    map.into_iter().map(|(k, v)| (k, v.as_str().unwrap_or_default().to_owned())).collect()
}

fn pod_labels(deployment: &Value) -> BTreeMap<String, String> {
    strings(&deployment["spec"]["template"]["metadata"]["labels"])
}

/// Whether every `key: value` of `selector` is among `labels`.
fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// The container's environment, with downward-API fields given the values a pod would have.
fn environment(container: &Value) -> Vec<(String, String)> {
    let env = container["env"].as_array().cloned().unwrap_or_default();
    env.iter()
        .map(|e| {
            let name = e["name"].as_str().unwrap().to_owned();
            let value = match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some("status.podIP") => "10.244.1.7".to_owned(),
                Some("metadata.namespace") => "orders".to_owned(),
                Some(other) => panic!("{name}: a field the test does not know: {other}"),
                None => {
                    e["value"].as_str().unwrap_or_else(|| panic!("{name}: no value")).to_owned()
                }
            };
            (name, value)
        })
        .collect()
}

/// `convoke run --print-config` with exactly `env` (nothing inherited): the effective settings,
/// or the binary's complaint.
fn print_config(env: &[(String, String)]) -> Result<toml::Table, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_convoke"))
        .args(["run", "--print-config"])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout).parse().unwrap())
}

fn settings() -> toml::Table {
    print_config(&environment(container(&deployment()))).unwrap_or_else(|e| panic!("{e}"))
}

fn text<'a>(settings: &'a toml::Table, key: &str) -> &'a str {
    let mut v = settings.get(key.split('.').next().unwrap()).unwrap();
    for part in key.split('.').skip(1) {
        v = &v[part];
    }
    v.as_str().unwrap_or_else(|| panic!("{key} is not a string: {v}"))
}

fn int(settings: &toml::Table, key: &str) -> i64 {
    let (table, field) = key.split_once('.').unwrap();
    settings[table][field].as_integer().unwrap_or_else(|| panic!("{key} is not a number"))
}

/// The container's port numbers by name.
fn ports(container: &Value) -> BTreeMap<String, i64> {
    let ports = container["ports"].as_array().unwrap();
    ports
        .iter()
        .map(|p| (p["name"].as_str().unwrap().to_owned(), p["containerPort"].as_i64().unwrap()))
        .collect()
}

#[test]
fn every_environment_variable_is_one_the_binary_reads() {
    let env = environment(container(&deployment()));
    let settings = print_config(&env).unwrap_or_else(|e| panic!("the binary refused: {e}"));
    for (name, value) in &env {
        if let Some(key) = name.strip_prefix(convoke::settings::ENV_PREFIX) {
            // CONVOKE_A__B sets a.b; the binary rejects unknown keys, so it reached a key.
            let path = key.to_lowercase().replace("__", ".");
            let mut v = &toml::Value::Table(settings.clone());
            for part in path.split('.') {
                v = v.get(part).unwrap_or_else(|| panic!("{name}: no key {path}"));
            }
            let shown = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
            assert_eq!(&shown, value, "{name} sets {path}");
        } else {
            assert!(ENV_VARS.contains(&name.as_str()), "{name} is read by nothing");
        }
    }
    // The check can fail: a misspelt key is refused.
    let mut wrong = env.clone();
    wrong.push(("CONVOKE_BOOTSTRAP__REQUIRED_CONTACT_POINTS".into(), "3".into()));
    let refused = print_config(&wrong).unwrap_err();
    assert!(refused.contains("bootstrap.required_contact_points"), "{refused}");
}

#[test]
fn the_probes_hit_routes_and_ports_the_node_serves() {
    let d = deployment();
    let c = container(&d);
    let settings = settings();
    let ports = ports(c);
    assert_eq!(ports.get("management"), Some(&int(&settings, "management.port")));
    assert_eq!(ports.get("remoting"), Some(&int(&settings, "cluster.port")));
    for (probe, key, route) in [
        ("readinessProbe", "management.health_checks.readiness_path", "/ready"),
        ("livenessProbe", "management.health_checks.liveness_path", "/alive"),
        ("startupProbe", "management.health_checks.startup_path", "/startup"),
    ] {
        let get = &c[probe]["httpGet"];
        let path = get["path"].as_str().unwrap();
        assert_eq!(path, text(&settings, key), "{probe}");
        assert!(ROUTES.contains(&("GET", route)) && path == route, "{probe}: {path}");
        let port = get["port"].as_str().unwrap();
        assert_eq!(ports.get(port), ports.get("management"), "{probe} port {port}");
    }
    // A pod that is still forming answers /alive, so liveness never needs a delay to spare it;
    // readiness has no failure action beyond leaving the pod out of endpoints.
    assert!(c["livenessProbe"]["initialDelaySeconds"].as_i64().unwrap() >= 10);
    let liveness = &c["livenessProbe"];
    let grace = liveness["periodSeconds"].as_i64().unwrap()
        * liveness["failureThreshold"].as_i64().unwrap();
    assert!(grace >= 30, "liveness kills after {grace} s of failures");
}

#[test]
fn a_pod_that_cannot_join_is_restarted_rather_than_left_waiting() {
    let settings = settings();
    // A join that does not complete makes the process exit; a pod in no cluster fails /alive.
    for key in [
        "cluster.shutdown_after_unsuccessful_join_seed_nodes",
        "management.health_checks.join_deadline",
    ] {
        let value = text(&settings, key);
        assert_ne!(value, "off", "{key} is off in the manifest");
    }
    let env = environment(container(&deployment()));
    assert!(
        env.iter()
            .any(|(k, _)| k == "CONVOKE_CLUSTER__SHUTDOWN_AFTER_UNSUCCESSFUL_JOIN_SEED_NODES"),
        "the manifest states the join give-up"
    );
}

#[test]
fn discovery_selects_the_pods_of_this_deployment_on_a_named_port() {
    let d = deployment();
    let settings = settings();
    assert_eq!(text(&settings, "discovery.method"), "kubernetes-api");
    let service = text(&settings, "bootstrap.service_name");
    let service = if service.is_empty() { text(&settings, "cluster.system_name") } else { service };
    let selector =
        text(&settings, "discovery.kubernetes_api.pod_label_selector").replace("%s", service);
    let selector: BTreeMap<String, String> = selector
        .split(',')
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or_else(|| panic!("selector {kv:?}"));
            (k.trim().to_owned(), v.trim().to_owned())
        })
        .collect();
    let labels = pod_labels(&d);
    assert!(selects(&selector, &labels), "{selector:?} does not select {labels:?}");
    let port_name = text(&settings, "bootstrap.port_name");
    assert!(ports(container(&d)).contains_key(port_name), "no container port {port_name:?}");
    assert_eq!(
        d["spec"]["template"]["spec"]["serviceAccountName"],
        manifest("serviceaccount.yaml")["metadata"]["name"]
    );
}

#[test]
fn the_contact_point_count_is_the_replica_count() {
    let d = deployment();
    let replicas = d["spec"]["replicas"].as_i64().unwrap();
    let settings = settings();
    assert_eq!(int(&settings, "bootstrap.required_contact_point_nr"), replicas);
}

#[test]
fn the_service_and_the_disruption_budget_select_the_pods() {
    let d = deployment();
    let labels = pod_labels(&d);
    assert!(selects(&strings(&d["spec"]["selector"]["matchLabels"]), &labels));

    let service = manifest("service.yaml");
    assert_eq!(service["spec"]["clusterIP"], "None", "headless");
    assert_eq!(service["spec"]["publishNotReadyAddresses"], true);
    assert!(selects(&strings(&service["spec"]["selector"]), &labels));
    let ports = ports(container(&d));
    for p in service["spec"]["ports"].as_array().unwrap() {
        let target = p["targetPort"].as_str().unwrap();
        assert!(ports.contains_key(target), "service port {target}");
    }

    let pdb = manifest("poddisruptionbudget.yaml");
    assert!(selects(&strings(&pdb["spec"]["selector"]["matchLabels"]), &labels));
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
}

/// The (API group, resource, verbs) a Role grants, checking that a RoleBinding gives it to the
/// Deployment's service account.
fn granted(role: &str, binding: &str) -> Vec<(String, String, Vec<String>)> {
    let role = manifest(role);
    let binding = manifest(binding);
    assert_eq!(binding["roleRef"]["kind"], "Role");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    let account = &deployment()["spec"]["template"]["spec"]["serviceAccountName"];
    let subjects = binding["subjects"].as_array().unwrap();
    assert!(subjects.iter().any(|s| s["kind"] == "ServiceAccount" && &s["name"] == account));
    let list = |v: &Value| -> Vec<String> {
        v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_owned()).collect()
    };
    let mut grants = Vec::new();
    for rule in role["rules"].as_array().unwrap() {
        for group in list(&rule["apiGroups"]) {
            for resource in list(&rule["resources"]) {
                let mut verbs = list(&rule["verbs"]);
                verbs.sort();
                grants.push((group.clone(), resource, verbs));
            }
        }
    }
    grants
}

fn sorted(verbs: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = verbs.iter().map(|s| (*s).to_owned()).collect();
    v.sort();
    v
}

#[test]
fn the_rbac_verbs_are_exactly_the_ones_the_code_uses() {
    assert_eq!(
        granted("role.yaml", "rolebinding.yaml"),
        [(String::new(), "pods".to_owned(), sorted(&POD_VERBS))]
    );
    assert_eq!(
        granted("lease-majority/role.yaml", "lease-majority/rolebinding.yaml"),
        [("coordination.k8s.io".to_owned(), "leases".to_owned(), sorted(&LEASE_VERBS))]
    );
}
