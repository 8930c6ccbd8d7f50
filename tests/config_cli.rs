//! `convoke run` with bad settings exits 2 and names the key.

use std::process::Command;

fn run(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_convoke"));
    cmd.arg("run").args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn bad_settings_exit_2_with_a_message_naming_the_key() {
    let dir = std::env::temp_dir().join(format!("convoke-config-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.toml");
    std::fs::write(&file, "[cluster]\nport = 25520\nunknown_thing = 1\n").unwrap();
    let file = file.to_str().unwrap().to_owned();
    type Case<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case<'_>> = vec![
        (vec!["--config", &file], vec![], "cluster.unknown_thing"),
        (vec!["--set", "cluster.port=\"abc\""], vec![], "cluster.port"),
        (vec![], vec![("CONVOKE_CLUSTER__PORT", "abc")], "cluster.port"),
        (vec!["--set", "cluster.gossip_interval=\"-1s\""], vec![], "cluster.gossip_interval"),
        (
            vec!["--set", "cluster.failure_detector.threshold=0"],
            vec![],
            "cluster.failure_detector.threshold",
        ),
        (
            vec!["--set", "cluster.failure_detector.threshold=-1.0"],
            vec![],
            "cluster.failure_detector.threshold",
        ),
        (vec!["--set", "nonsense=1"], vec![], "nonsense"),
        (vec!["--config", "/nonexistent/convoke.toml"], vec![], "--config"),
    ];
    for (args, env, key) in cases {
        let (code, stderr) = run(&args, &env);
        assert_eq!(code, Some(2), "{args:?} {env:?}: {stderr}");
        assert!(stderr.contains(key), "{args:?} {env:?}: {stderr}");
    }
}

#[test]
fn print_config_shows_the_effective_settings() {
    let out = Command::new(env!("CARGO_BIN_EXE_convoke"))
        .args(["run", "--print-config", "--set", "cluster.port=4321"])
        .env("CONVOKE_CLUSTER__ROLES", "[\"worker\"]")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let parsed: toml::Table = text.parse().unwrap();
    assert_eq!(parsed["cluster"]["port"].as_integer(), Some(4321));
    assert_eq!(parsed["cluster"]["roles"].as_array().unwrap()[0].as_str(), Some("worker"));
    assert_eq!(parsed["management"]["port"].as_integer(), Some(8558));
}

#[test]
fn the_admin_clients_variables_are_not_settings_keys() {
    let out = Command::new(env!("CARGO_BIN_EXE_convoke"))
        .args(["run", "--print-config"])
        .env("CONVOKE_URL", "http://10.0.0.7:8558")
        .env("CONVOKE_TOKEN", "secret")
        .env("CONVOKE_CLUSTER__PORT", "4321")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let parsed: toml::Table = String::from_utf8_lossy(&out.stdout).parse().unwrap();
    assert_eq!(parsed["cluster"]["port"].as_integer(), Some(4321));
    assert!(!parsed.contains_key("url") && !parsed.contains_key("token"));
}

#[test]
fn a_usage_error_exits_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_convoke"))
        .args(["run", "--no-such-flag"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn unusable_split_brain_settings_exit_2_naming_the_key() {
    let strategy = |s: &str| format!("cluster.split_brain_resolver.active_strategy={s}");
    let lease = strategy("lease-majority");
    let prefix = "cluster.split_brain_resolver.lease_majority";
    let cases: Vec<(Vec<String>, String)> = vec![
        (
            vec![strategy("static-quorum")],
            "cluster.split_brain_resolver.static_quorum.quorum_size".into(),
        ),
        // Outside a pod (no KUBERNETES_SERVICE_HOST), lease-majority needs the API server's URL.
        (vec![lease.clone()], format!("{prefix}.kubernetes_api_url")),
        (
            vec![
                lease,
                format!("{prefix}.kubernetes_api_url=\"https://127.0.0.1:6443\""),
                format!("{prefix}.kubernetes_ca_path=\"/nonexistent/ca.crt\""),
            ],
            format!("{prefix}.kubernetes_ca_path"),
        ),
    ];
    for (sets, key) in cases {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_convoke"));
        cmd.args(["run", "--set", "cluster.port=0", "--set", "management.enabled=false"]);
        for s in &sets {
            cmd.arg("--set").arg(s);
        }
        cmd.env_remove("KUBERNETES_SERVICE_HOST").env_remove("KUBERNETES_SERVICE_PORT");
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{sets:?}: {stderr}");
        assert!(stderr.contains(&key), "{sets:?}: {stderr}");
    }
}

#[test]
fn the_readme_lists_every_key_with_its_default() {
    let out = Command::new(env!("CARGO_BIN_EXE_convoke"))
        .args(["run", "--print-config"])
        .env_clear()
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let printed = String::from_utf8_lossy(&out.stdout);
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let (_, after) = readme
        .split_once("Every key with its default")
        .expect("README has the configuration reference");
    let block = after.split("```toml\n").nth(1).and_then(|b| b.split("```").next()).unwrap();
    assert_eq!(block.trim(), printed.trim(), "README.md's defaults differ from --print-config");
}

#[path = "support/certs.rs"]
#[allow(dead_code, unreachable_pub)]
mod certs;

#[test]
fn unusable_cluster_tls_files_exit_2_naming_the_key() {
    use certs::{Ca, Files, Flaw};
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("config-cli CA");
    let files = Files::write(dir.path(), &ca.leaf(Flaw::None), &ca.pem);
    let other_key = dir.path().join("other.key");
    std::fs::write(&other_key, ca.leaf(Flaw::None).key_pem).unwrap();
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "this is not PEM\n").unwrap();
    let path = |p: &std::path::Path| format!("{:?}", p.display().to_string());
    let good = files.sets("30s");
    let with = |key: &str, value: String| -> Vec<String> {
        let mut sets = good.clone();
        sets.push(format!("cluster.tls.{key}={value}"));
        sets
    };
    let cases = [
        (with("cert_path", "\"/nonexistent/tls.crt\"".into()), "cluster.tls.cert_path"),
        (with("key_path", path(&other_key)), "cluster.tls.key_path"),
        (with("ca_path", path(&not_pem)), "cluster.tls.ca_path"),
        (with("ca_path", "\"/nonexistent/ca.crt\"".into()), "cluster.tls.ca_path"),
        (with("peer_name", "\"\"".into()), "cluster.tls.peer_name"),
        (with("reload_interval", "\"0s\"".into()), "cluster.tls.reload_interval"),
    ];
    for (sets, key) in cases {
        let args: Vec<&str> = sets.iter().flat_map(|s| ["--set", s.as_str()]).collect();
        let (code, stderr) = run(&args, &[]);
        assert_eq!(code, Some(2), "{sets:?}: {stderr}");
        assert!(stderr.contains(key), "{sets:?}: {stderr}");
    }
    // The same files, unchanged, are accepted.
    let args: Vec<&str> =
        good.iter().flat_map(|s| ["--set", s.as_str()]).chain(["--print-config"]).collect();
    let (code, stderr) = run(&args, &[]);
    assert_eq!(code, Some(0), "{stderr}");
}
