//! The settings loader (`convoke::settings::Settings::load`) with the input as the TOML settings
//! file (`--config FILE`), and neither `CONVOKE_*` variables nor `--set`s.
//!
//! `Sources` takes the file as a path, so the input is written to a file in a directory of its
//! own under the temporary directory (`TMPDIR`; `.ci/fuzz` points it at a directory it removes).
//!
//! Properties: loading never panics; settings that load pass their own validation, and print
//! (`--print-config`) as TOML that loads back to equal settings.

#![no_main]

use std::path::PathBuf;
use std::sync::LazyLock;

use convoke::settings::{Settings, Sources};
use libfuzzer_sys::fuzz_target;

/// This process's directory for the two files: the input and the printed settings.
static DIR: LazyLock<PathBuf> = LazyLock::new(|| {
    let dir = std::env::temp_dir().join(format!("convoke-fuzz-settings-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the settings directory");
    dir
});

fn load(name: &str, toml: &[u8]) -> Result<Settings, convoke::settings::SettingsError> {
    let path = DIR.join(name);
    std::fs::write(&path, toml).expect("write the settings file");
    Settings::load(&Sources { file: Some(&path), env: false, sets: vec![] })
}

fuzz_target!(|data: &[u8]| {
    let Ok(settings) = load("node.toml", data) else { return };
    if let Err(e) = settings.validate() {
        panic!("loaded settings do not validate: {e}\n{settings:?}");
    }
    let printed = settings.to_toml();
    let back = load("printed.toml", printed.as_bytes())
        .unwrap_or_else(|e| panic!("printed settings do not load: {e}\n{printed}"));
    assert_eq!(back, settings, "printed settings load differently:\n{printed}");
});
