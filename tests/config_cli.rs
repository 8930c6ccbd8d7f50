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
fn a_usage_error_exits_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_convoke"))
        .args(["run", "--no-such-flag"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
