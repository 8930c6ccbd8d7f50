//! The Kubernetes manifests in `k8s/` checked against the code: the probes hit routes and ports
//! the node serves, the label selector kubernetes-api discovery uses matches the pod labels, every
//! environment variable is one the binary reads (`convoke run --print-config` with exactly the
//! Deployment's environment), the contact point count matches the replicas, and the RBAC verbs
//! are exactly the ones the code uses.
//!
//! `k8s/` is a kustomize base (`k8s/base/`) with overlays (`k8s/overlays/`): every file is listed
//! in its directory's `kustomization.yaml`, and the tests apply an overlay's Deployment patch the
//! way kustomize does (`overlay_deployment`); `.ci/operator-kit` builds the overlays with the real
//! `kubectl kustomize` and runs the ignored test that compares the two.
//!
//! The tls overlay (mutual TLS on the cluster transport, certificates from cert-manager) against
//! the code and against the base: its Deployment is the base one plus the TLS additions only,
//! every variable it adds is a `[cluster.tls]` key the binary reads, the paths it configures are
//! the files cert-manager writes into the mounted Secret of the Certificate, the Certificate is
//! for the Service the pods are in and for both ends of a connection, issued by the CA of the
//! overlay's `issuer.yaml`. The lease-majority overlay selects that strategy and grants the lease.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use convoke::management::ROUTES;
use convoke_discovery::kubernetes::{DELETION_COST_VERBS, ENV_VARS, LEASE_VERBS, POD_VERBS};
use serde_json::Value;

fn manifest(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("k8s").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn deployment() -> Value {
    manifest("base/deployment.yaml")
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
                Some("metadata.name") => "convoke-7d9f8c6b5-x2kq4".to_owned(),
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
    each_variable_sets_its_key(&env, &settings);
    // The check can fail: a misspelt key is refused.
    let mut wrong = env.clone();
    wrong.push(("CONVOKE_BOOTSTRAP__REQUIRED_CONTACT_POINTS".into(), "3".into()));
    let refused = print_config(&wrong).unwrap_err();
    assert!(refused.contains("bootstrap.required_contact_points"), "{refused}");
}

/// Each `CONVOKE_*` variable of `env` set its key in `settings` (as `--print-config` printed
/// them) to its value; every other variable is one the code reads.
fn each_variable_sets_its_key(env: &[(String, String)], settings: &toml::Table) {
    for (name, value) in env {
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
            let read = ENV_VARS.contains(&name.as_str()) || name == convoke::settings::POD_NAME_ENV;
            assert!(read, "{name} is read by nothing");
        }
    }
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
        manifest("base/serviceaccount.yaml")["metadata"]["name"]
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

    let service = manifest("base/service.yaml");
    assert_eq!(service["spec"]["clusterIP"], "None", "headless");
    assert_eq!(service["spec"]["publishNotReadyAddresses"], true);
    assert!(selects(&strings(&service["spec"]["selector"]), &labels));
    let ports = ports(container(&d));
    for p in service["spec"]["ports"].as_array().unwrap() {
        let target = p["targetPort"].as_str().unwrap();
        assert!(ports.contains_key(target), "service port {target}");
    }

    let pdb = manifest("base/poddisruptionbudget.yaml");
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
        granted("base/role.yaml", "base/rolebinding.yaml"),
        [(
            String::new(),
            "pods".to_owned(),
            sorted(&[&POD_VERBS[..], &DELETION_COST_VERBS].concat())
        )]
    );
    assert_eq!(
        granted("overlays/lease-majority/role.yaml", "overlays/lease-majority/rolebinding.yaml",),
        [("coordination.k8s.io".to_owned(), "leases".to_owned(), sorted(&LEASE_VERBS))]
    );
}

// --- k8s/tls/: mutual TLS on the cluster transport ---------------------------------------------

/// The prefix of the `[cluster.tls]` variables.
const TLS_ENV: &str = "CONVOKE_CLUSTER__TLS__";

/// The files of the mounted Secret as cert-manager writes them, by the key each configures.
const TLS_FILES: [(&str, &str); 3] = [
    ("CONVOKE_CLUSTER__TLS__CERT_PATH", "tls.crt"),
    ("CONVOKE_CLUSTER__TLS__KEY_PATH", "tls.key"),
    ("CONVOKE_CLUSTER__TLS__CA_PATH", "ca.crt"),
];

fn tls_deployment() -> Value {
    overlay_deployment("tls")
}

/// Every object of the resources `k8s/overlays/tls/` adds to the base.
fn tls_objects() -> Vec<Value> {
    overlay_objects("tls")
}

/// The object of `kind` named `name` in `k8s/overlays/tls/`.
fn tls_object(kind: &str, name: &str) -> Value {
    let mut found: Vec<Value> = tls_objects()
        .into_iter()
        .filter(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .collect();
    assert_eq!(found.len(), 1, "one {kind} {name} in k8s/overlays/tls/");
    found.remove(0)
}

/// The nodes' Certificate: the one whose Secret the TLS Deployment mounts.
fn node_certificate() -> Value {
    let d = tls_deployment();
    let secret = tls_volume(&d)["secret"]["secretName"].as_str().unwrap().to_owned();
    let mut found: Vec<Value> = tls_objects()
        .into_iter()
        .filter(|o| o["kind"] == "Certificate" && o["spec"]["secretName"] == secret.as_str())
        .collect();
    assert_eq!(found.len(), 1, "one Certificate in k8s/overlays/tls/ writes the Secret {secret}");
    found.remove(0)
}

/// The file names (no directory) of `*.yaml` in `dir`, sorted.
fn yaml_files(dir: &Path) -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| f.ends_with(".yaml") || f.ends_with(".yml"))
        .collect();
    files.sort();
    files
}

/// The value of the variable `name` in `env`.
fn var<'a>(env: &'a [(String, String)], name: &str) -> &'a str {
    let found = env.iter().find(|(k, _)| k == name);
    found.map(|(_, v)| v.as_str()).unwrap_or_else(|| panic!("no {name} in the TLS Deployment"))
}

/// The pod's volume that holds the TLS files: the one mounted where CONVOKE_CLUSTER__TLS__CA_PATH
/// points.
fn tls_volume(d: &Value) -> &Value {
    let env = environment(container(d));
    let (mount, _) = mount_of(container(d), var(&env, "CONVOKE_CLUSTER__TLS__CA_PATH"));
    let name = &mount["name"];
    let volumes = d["spec"]["template"]["spec"]["volumes"].as_array().expect("pod volumes");
    let found: Vec<&Value> = volumes.iter().filter(|v| &v["name"] == name).collect();
    assert_eq!(found.len(), 1, "one volume named {name}");
    found[0]
}

/// The container's volume mount whose directory holds `path`, and `path` inside it.
fn mount_of<'a>(container: &'a Value, path: &str) -> (&'a Value, String) {
    let mounts = container["volumeMounts"].as_array().expect("volumeMounts");
    let found: Vec<(&Value, String)> = mounts
        .iter()
        .filter_map(|m| {
            let dir = m["mountPath"].as_str()?.trim_end_matches('/');
            let rest = path.strip_prefix(dir)?.strip_prefix('/')?;
            Some((m, rest.to_owned()))
        })
        .collect();
    assert_eq!(found.len(), 1, "{path} lies under exactly one volume mount: {mounts:?}");
    found.into_iter().next().unwrap()
}

#[test]
fn every_environment_variable_of_the_tls_deployment_is_one_the_binary_reads() {
    // Until `[cluster.tls]` exists in the binary, it refuses the variables (this test fails then).
    let d = tls_deployment();
    let mut env = environment(container(&d));
    for (key, _) in TLS_FILES {
        var(&env, key);
    }
    assert_eq!(var(&env, "CONVOKE_CLUSTER__TLS__ENABLED"), "true");
    // With TLS on, the node loads the files at start; give it files as cert-manager writes them,
    // at the same names in a directory of this machine instead of the pod's mount.
    let (mount, _) = mount_of(container(&d), var(&env, "CONVOKE_CLUSTER__TLS__CA_PATH"));
    let mount_path = mount["mountPath"].as_str().unwrap().trim_end_matches('/').to_owned();
    let dir = tempfile::tempdir().unwrap();
    write_cert_manager_secret(dir.path(), &node_certificate());
    let mut moved = 0;
    for (_, value) in &mut env {
        if let Some(file) = value.strip_prefix(&format!("{mount_path}/")) {
            *value = dir.path().join(file).display().to_string();
            moved += 1;
        }
    }
    assert_eq!(moved, TLS_FILES.len(), "the three files, and nothing else, are in the mount");
    let settings = print_config(&env).unwrap_or_else(|e| panic!("the binary refused: {e}"));
    each_variable_sets_its_key(&env, &settings);
    assert_eq!(settings["cluster"]["tls"]["enabled"].as_bool(), Some(true));
    // The check can fail: a key [cluster.tls] does not have is refused.
    let mut wrong = env.clone();
    wrong.push(("CONVOKE_CLUSTER__TLS__CERT_FILE".into(), "/tmp/x".into()));
    let refused = print_config(&wrong).unwrap_err();
    assert!(refused.contains("cluster.tls.cert_file"), "{refused}");
}

/// Writes `tls.crt`, `tls.key` and `ca.crt` into `dir` as cert-manager would for `certificate`
/// issued by a CA Issuer: a CA, and a leaf it signed for the Certificate's DNS names and usages,
/// with an ECDSA P-256 key in PKCS#8.
fn write_cert_manager_secret(dir: &Path, certificate: &Value) {
    use rcgen::{
        BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
        KeyUsagePurpose,
    };
    let spec = &certificate["spec"];
    assert_eq!(spec["privateKey"]["algorithm"], "ECDSA", "the key rcgen makes here");
    assert_eq!(spec["privateKey"]["encoding"], "PKCS8");
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let names = list(&spec["dnsNames"]);
    let mut leaf = CertificateParams::new(names).unwrap();
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.extended_key_usages = list(&spec["usages"])
        .iter()
        .filter_map(|u| match u.as_str() {
            "server auth" => Some(ExtendedKeyUsagePurpose::ServerAuth),
            "client auth" => Some(ExtendedKeyUsagePurpose::ClientAuth),
            _ => None,
        })
        .collect();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf_cert = leaf.signed_by(&leaf_key, &issuer).unwrap();
    std::fs::write(dir.join("tls.crt"), leaf_cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), leaf_key.serialize_pem()).unwrap();
    std::fs::write(dir.join("ca.crt"), ca_cert.pem()).unwrap();
}

fn list(v: &Value) -> Vec<String> {
    let items = v.as_array().unwrap_or_else(|| panic!("not a list: {v}"));
    items.iter().map(|s| s.as_str().unwrap().to_owned()).collect()
}

#[test]
fn the_tls_paths_configured_are_the_files_cert_manager_writes_into_the_mounted_secret() {
    let d = tls_deployment();
    let c = container(&d);
    let env = environment(c);
    let certificate = node_certificate();
    let secret_name = certificate["spec"]["secretName"].as_str().unwrap();
    for (key, file) in TLS_FILES {
        let path = var(&env, key);
        let (mount, inside) = mount_of(c, path);
        assert_eq!(inside, file, "{key} = {path}: cert-manager writes {file}");
        assert_eq!(mount["readOnly"], true, "{key}: the mount is read-only");
        // A subPath mount is never updated by the kubelet: a renewed certificate would not reach
        // the node.
        assert!(mount.get("subPath").is_none(), "{key}: a subPath mount misses renewals");
        let volumes = d["spec"]["template"]["spec"]["volumes"].as_array().unwrap();
        let volume = volumes.iter().find(|v| v["name"] == mount["name"]).unwrap();
        assert_eq!(volume["secret"]["secretName"], secret_name, "{key}: the Certificate's Secret");
        // Without `items`, every key of the Secret is a file of its own name.
        assert!(volume["secret"].get("items").is_none(), "{key}: items would rename the files");
    }
    // The three files are in one directory, so one Secret update changes them together.
    let dirs: BTreeMap<&str, ()> =
        TLS_FILES.iter().map(|(k, _)| (var(&env, k).rsplit_once('/').unwrap().0, ())).collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    // The user the container runs as can read the key: through the pod's fsGroup when the files
    // are not world-readable.
    let mode = tls_volume(&d)["secret"]["defaultMode"].as_i64().unwrap_or(0o644);
    let user = c["securityContext"]["runAsUser"].as_i64();
    let group = d["spec"]["template"]["spec"]["securityContext"]["fsGroup"].as_i64();
    assert!(
        mode & 0o004 != 0 || (mode & 0o040 != 0 && group.is_some()),
        "mode {mode:o}: user {user:?} cannot read the key (fsGroup {group:?})"
    );
    assert_eq!(mode & 0o002, 0, "the key is not world-writable");
}

#[test]
fn the_certificate_is_for_the_service_the_pods_are_in_and_for_both_ends_of_a_connection() {
    let d = tls_deployment();
    let env = environment(container(&d));
    let peer_name = var(&env, "CONVOKE_CLUSTER__TLS__PEER_NAME");
    // The name every member's certificate carries is the headless Service's, in the
    // namespace-agnostic form (no ".<namespace>.svc"): the same manifests in any namespace.
    let service = manifest("base/service.yaml");
    assert_eq!(peer_name, service["metadata"]["name"].as_str().unwrap());
    assert_eq!(service["spec"]["clusterIP"], "None", "headless");
    assert!(selects(&strings(&service["spec"]["selector"]), &pod_labels(&d)), "the pods' Service");

    let certificate = node_certificate();
    let spec = &certificate["spec"];
    assert!(list(&spec["dnsNames"]).iter().any(|n| n == peer_name), "dnsNames lack {peer_name}");
    // Each node accepts connections (server) and makes them (client), presenting this one
    // certificate both ways.
    let usages = list(&spec["usages"]);
    for usage in ["server auth", "client auth", "digital signature"] {
        assert!(usages.iter().any(|u| u == usage), "usages lack {usage:?}: {usages:?}");
    }
    assert_eq!(spec["privateKey"]["rotationPolicy"], "Always", "a renewal makes a new key");
    let duration = go_duration(spec["duration"].as_str().expect("duration"));
    let renew_before = go_duration(spec["renewBefore"].as_str().expect("renewBefore"));
    assert!(renew_before < duration, "renewBefore {renew_before:?} >= duration {duration:?}");
    // Renewed at least a day early: time for the kubelet to update the Secret volume and for
    // every node to reload it (reload_interval), with a margin for a stuck renewal.
    let reload = go_duration(var(&env, "CONVOKE_CLUSTER__TLS__RELOAD_INTERVAL"));
    assert!(renew_before >= Duration::from_secs(24 * 3600) && reload < renew_before);
}

#[test]
fn the_certificate_is_issued_by_the_ca_of_k8s_tls() {
    // Node Certificate -> CA Issuer -> its CA Certificate (the Secret the Issuer signs with) ->
    // the self-signed Issuer: cert-manager's CA pattern, entirely in k8s/overlays/tls/.
    let issuer_of = |certificate: &Value| -> Value {
        let r = &certificate["spec"]["issuerRef"];
        assert_eq!(r["kind"], "Issuer", "a namespaced Issuer, so the CA is this namespace's");
        assert_eq!(r["group"], "cert-manager.io");
        tls_object("Issuer", r["name"].as_str().unwrap())
    };
    let ca_issuer = issuer_of(&node_certificate());
    let ca_secret = ca_issuer["spec"]["ca"]["secretName"].as_str().expect("a CA Issuer");
    let ca_certificates: Vec<Value> = tls_objects()
        .into_iter()
        .filter(|o| o["kind"] == "Certificate" && o["spec"]["secretName"] == ca_secret)
        .collect();
    assert_eq!(ca_certificates.len(), 1, "one Certificate writes the CA Secret {ca_secret}");
    let ca = &ca_certificates[0];
    assert_eq!(ca["spec"]["isCA"], true);
    let root = issuer_of(ca);
    assert!(root["spec"]["selfSigned"].is_object(), "the CA is self-signed: {root}");
    // The node certificate is not the CA, nor signed by the self-signed Issuer directly.
    assert_ne!(node_certificate()["spec"]["isCA"], true);
    assert_ne!(ca_issuer["metadata"]["name"], root["metadata"]["name"]);
}

#[test]
fn the_tls_deployment_is_the_base_deployment_plus_the_tls_additions() {
    let base = deployment();
    let mut tls = tls_deployment();
    let volume = tls_volume(&tls)["name"].clone();
    let pod = &mut tls["spec"]["template"]["spec"];
    // The additions: the [cluster.tls] variables, the Secret's volume and its mount, the fsGroup
    // that lets the container's user read the key.
    let removed = {
        let c = &mut pod["containers"][0];
        let env = c["env"].as_array_mut().unwrap();
        let before = env.len();
        env.retain(|e| !e["name"].as_str().unwrap().starts_with(TLS_ENV));
        let removed = before - env.len();
        remove_named(c, "volumeMounts", &volume);
        removed
    };
    assert!(removed >= TLS_FILES.len() + 2, "the TLS variables: {removed}");
    remove_named(pod, "volumes", &volume);
    if let Some(sc) = pod.get_mut("securityContext").and_then(Value::as_object_mut) {
        sc.remove("fsGroup");
        if sc.is_empty() {
            pod.as_object_mut().unwrap().remove("securityContext");
        }
    }
    // Everything else is the base's, so a change there that is not made here fails (and the
    // other checks of the base hold for the TLS Deployment too).
    assert_eq!(tls, base, "the tls overlay changes the base Deployment beyond TLS");
}

/// Removes the entry named `name` from the list `key` of `object`, and the list once empty.
fn remove_named(object: &mut Value, key: &str, name: &Value) {
    let list = object[key].as_array_mut().unwrap_or_else(|| panic!("no {key}"));
    let before = list.len();
    list.retain(|e| &e["name"] != name);
    assert_eq!(before - list.len(), 1, "one {key} entry named {name}");
    if list.is_empty() {
        object.as_object_mut().unwrap().remove(key);
    }
}

// --- kustomize: the base and its overlays ------------------------------------------------------

/// The root of the manifests.
fn k8s() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("k8s")
}

/// The overlays of `k8s/overlays/`, by directory name.
fn overlays() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(k8s().join("overlays"))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_dir())
        .map(|e| e.file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// The `kustomization.yaml` of `dir` (relative to `k8s/`).
fn kustomization(dir: &str) -> Value {
    manifest(&format!("{dir}/kustomization.yaml"))
}

/// The patch files a kustomization applies (`patches: - path: FILE`).
fn patch_files(kustomization: &Value) -> Vec<String> {
    let patches = kustomization["patches"].as_array().cloned().unwrap_or_default();
    patches.iter().map(|p| p["path"].as_str().expect("a patch by path").to_owned()).collect()
}

/// Every object of the YAML file at `path` (several documents to a file).
fn objects_of(path: &Path) -> Vec<Value> {
    use serde::Deserialize;
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut objects = Vec::new();
    for doc in serde_norway::Deserializer::from_str(&text) {
        let v = Value::deserialize(doc).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if !v.is_null() {
            objects.push(v);
        }
    }
    objects
}

/// The objects of the resource files `overlay` adds to the base (the base itself not included).
fn overlay_objects(overlay: &str) -> Vec<Value> {
    let dir = format!("overlays/{overlay}");
    list(&kustomization(&dir)["resources"])
        .iter()
        .filter(|r| r.as_str() != "../../base")
        .flat_map(|r| objects_of(&k8s().join(&dir).join(r)))
        .collect()
}

/// The base Deployment with `overlay`'s patches applied as kustomize applies a strategic-merge
/// patch to these fields: maps merge key by key, the lists of named things (containers, env,
/// volumes, ports; volume mounts by mount path) merge entry by entry, anything else is replaced.
fn overlay_deployment(overlay: &str) -> Value {
    let dir = format!("overlays/{overlay}");
    let mut d = deployment();
    for file in patch_files(&kustomization(&dir)) {
        let patch = manifest(&format!("{dir}/{file}"));
        assert_eq!(patch["kind"], "Deployment", "{dir}/{file}: patches the Deployment");
        assert_eq!(patch["metadata"]["name"], d["metadata"]["name"], "{dir}/{file}");
        merge(&mut d, &patch, None);
    }
    d
}

fn merge(target: &mut Value, patch: &Value, field: Option<&str>) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                match t.get_mut(k) {
                    Some(existing) => merge(existing, v, Some(k)),
                    None => {
                        t.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (Value::Array(t), Value::Array(p)) if p.iter().all(Value::is_object) => {
            let key = if field == Some("volumeMounts") { "mountPath" } else { "name" };
            for item in p {
                match t.iter_mut().find(|e| e[key] == item[key] && !item[key].is_null()) {
                    Some(existing) => merge(existing, item, None),
                    None => t.push(item.clone()),
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

#[test]
fn every_manifest_is_in_a_kustomization_and_every_overlay_builds_on_the_base() {
    // A file nobody lists would be missed by `kubectl apply -k`; a listed file that is gone fails
    // the build. The base lists its files; an overlay lists the base, its own resources and the
    // patches, which together are every file in its directory.
    let base: Vec<String> = list(&kustomization("base")["resources"]);
    let mut files = yaml_files(&k8s().join("base"));
    files.retain(|f| f != "kustomization.yaml");
    let mut listed = base.clone();
    listed.sort();
    assert_eq!(listed, files, "k8s/base/kustomization.yaml lists every file of k8s/base/");
    let names = overlays();
    for want in ["plain", "tls", "lease-majority"] {
        assert!(names.iter().any(|n| n == want), "no overlay {want}: {names:?}");
    }
    for overlay in names {
        let dir = format!("overlays/{overlay}");
        let k = kustomization(&dir);
        let resources = list(&k["resources"]);
        assert_eq!(resources.first().map(String::as_str), Some("../../base"), "{dir}: the base");
        let mut listed: Vec<String> = resources[1..].to_vec();
        listed.extend(patch_files(&k));
        listed.sort();
        let mut files = yaml_files(&k8s().join(&dir));
        files.retain(|f| f != "kustomization.yaml");
        assert_eq!(listed, files, "k8s/{dir}/kustomization.yaml lists every file of k8s/{dir}/");
        // Nothing renames or relabels what the other checks rely on.
        for field in ["namePrefix", "nameSuffix", "namespace", "commonLabels", "labels", "images"] {
            assert!(k.get(field).is_none(), "{dir}: {field} would change the base");
        }
        // The patched Deployment is still one the binary accepts.
        let env = environment(container(&overlay_deployment(&overlay)));
        if overlay != "tls" {
            // (the tls overlay's files are checked with cert-manager's files in place above)
            let settings = print_config(&env).unwrap_or_else(|e| panic!("{dir}: refused: {e}"));
            each_variable_sets_its_key(&env, &settings);
        }
    }
}

#[test]
fn the_lease_majority_overlay_selects_the_strategy_and_grants_the_lease() {
    let d = overlay_deployment("lease-majority");
    let settings = print_config(&environment(container(&d))).unwrap();
    assert_eq!(text(&settings, "cluster.split_brain_resolver.active_strategy"), "lease-majority");
    // The base keeps keep-majority, and the overlay adds the lease's Role and binding only.
    let base = print_config(&environment(container(&deployment()))).unwrap();
    assert_eq!(text(&base, "cluster.split_brain_resolver.active_strategy"), "keep-majority");
    let mut kinds: Vec<String> = overlay_objects("lease-majority")
        .iter()
        .map(|o| o["kind"].as_str().unwrap().to_owned())
        .collect();
    kinds.sort();
    assert_eq!(kinds, ["Role", "RoleBinding"]);
}

/// `(kind, name)` of every object, sorted.
fn kinds_and_names(objects: &[Value]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = objects
        .iter()
        .map(|o| {
            (o["kind"].as_str().unwrap().to_owned(), o["metadata"]["name"].as_str().unwrap().into())
        })
        .collect();
    v.sort();
    v
}

/// `v` with every list of named entries sorted by name (kustomize may order merged entries
/// differently from [`merge`]; the order of variables and volumes means nothing).
fn normalised(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, v)| (k.clone(), normalised(v))).collect())
        }
        Value::Array(a) => {
            let mut items: Vec<Value> = a.iter().map(normalised).collect();
            if items.iter().all(|i| i["name"].is_string()) {
                items.sort_by(|x, y| x["name"].as_str().cmp(&y["name"].as_str()));
            }
            Value::Array(items)
        }
        other => other.clone(),
    }
}

#[test]
#[ignore = "needs the overlays built by kubectl kustomize: .ci/operator-kit runs it"]
fn the_overlays_kubectl_builds_are_the_ones_these_tests_check() {
    // `.ci/operator-kit` builds each overlay with `kubectl kustomize` into
    // $CONVOKE_KUSTOMIZE_BUILD/<overlay>.yaml; here they are compared with what the tests above
    // check: the base's objects and the overlay's, and the Deployment as `overlay_deployment`
    // makes it. So the checks above hold for what `kubectl apply -k` applies.
    let built = std::env::var("CONVOKE_KUSTOMIZE_BUILD").expect("CONVOKE_KUSTOMIZE_BUILD");
    let base: Vec<Value> = list(&kustomization("base")["resources"])
        .iter()
        .flat_map(|f| objects_of(&k8s().join("base").join(f)))
        .collect();
    for overlay in overlays() {
        let objects = objects_of(&Path::new(&built).join(format!("{overlay}.yaml")));
        let mut want = base.clone();
        want.extend(overlay_objects(&overlay));
        assert_eq!(kinds_and_names(&objects), kinds_and_names(&want), "{overlay}: the objects");
        let deployments: Vec<&Value> =
            objects.iter().filter(|o| o["kind"] == "Deployment").collect();
        assert_eq!(deployments.len(), 1, "{overlay}: one Deployment");
        assert_eq!(
            normalised(deployments[0]),
            normalised(&overlay_deployment(&overlay)),
            "{overlay}: kubectl kustomize built another Deployment than the tests check"
        );
        for o in &objects {
            if o["kind"] != "Deployment" {
                let same = |w: &&Value| w["kind"] == o["kind"] && w["metadata"] == o["metadata"];
                let source = want.iter().find(same).unwrap_or_else(|| {
                    panic!("{overlay}: {} {} differs in its metadata", o["kind"], o["metadata"])
                });
                assert_eq!(normalised(o), normalised(source), "{overlay}: {}", o["kind"]);
            }
        }
    }
}

/// A Go duration as cert-manager takes it (`2160h`, `1h30m`, `30s`).
fn go_duration(text: &str) -> Duration {
    let mut total = Duration::ZERO;
    let mut number = String::new();
    for ch in text.chars() {
        if ch.is_ascii_digit() || ch == '.' {
            number.push(ch);
            continue;
        }
        let n: f64 = number.parse().unwrap_or_else(|_| panic!("duration {text:?}"));
        let unit = match ch {
            'h' => 3600.0,
            'm' => 60.0,
            's' => 1.0,
            _ => panic!("duration {text:?}: unit {ch:?}"),
        };
        total += Duration::from_secs_f64(n * unit);
        number.clear();
    }
    assert!(number.is_empty() && !total.is_zero(), "duration {text:?}");
    total
}
