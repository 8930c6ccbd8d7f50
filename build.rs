//! Link options for the release `convoke` binary that shrink what a running node keeps mapped
//! (docs/benchmarks.md, "Memory of a node process"):
//!
//! - `--symbol-ordering-file=link/convoke.order` places the functions a running node executes
//!   next to each other, so the kernel maps a few contiguous megabytes of code instead of pages
//!   scattered over the whole text. `benches/symbol-order.sh` regenerates the list; names missing
//!   from a build (a new toolchain renames them) only lose the ordering, never fail the link.
//! - `-z pack-relative-relocs` stores the relative relocations in a compact table (DT_RELR), so
//!   the start-up no longer reads almost a megabyte of them. The binary then needs glibc 2.36 or
//!   newer, which the dynamic loader checks at start.
//!
//! Each option is used only when the linker accepts it: the build script links a tiny program
//! with the same compiler, target, flags and linker first. Other linkers and targets build as
//! before; debug and instrumented builds are left alone.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const ORDER_FILE: &str = "link/convoke.order";

fn main() {
    println!("cargo:rerun-if-changed={ORDER_FILE}");
    println!("cargo:rerun-if-changed=build.rs");
    // Instrumented builds (sanitizers, cargo-fuzz) never ship the binary; their flags also make
    // the probe below fail.
    let instrumented =
        env::var_os("CARGO_CFG_SANITIZE").is_some() || env::var_os("CARGO_CFG_FUZZING").is_some();
    if env::var("PROFILE").as_deref() != Ok("release")
        || env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux")
        || instrumented
    {
        return;
    }
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets it"));
    let order = manifest_dir.join(ORDER_FILE);
    let mut candidates = vec![vec![
        format!("-Wl,--symbol-ordering-file={}", order.display()),
        "-Wl,--no-warn-symbol-ordering".to_owned(),
    ]];
    // glibc's loader checks for DT_RELR support by a symbol version; other C libraries may
    // ignore the table, so the option is only offered for glibc targets.
    if env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu") {
        candidates.push(vec!["-Wl,-z,pack-relative-relocs".to_owned()]);
    }
    for args in candidates {
        if links_with(&out_dir, &args) {
            for arg in &args {
                println!("cargo:rustc-link-arg-bin=convoke={arg}");
            }
        } else {
            println!("cargo:warning=the linker does not accept {}; linking without it", args[0]);
        }
    }
}

/// Whether a trivial program links for the build's target with `args` added to the link line.
fn links_with(out_dir: &Path, args: &[String]) -> bool {
    let source = out_dir.join("link_probe.rs");
    if std::fs::write(&source, "fn main() {}\n").is_err() {
        return false;
    }
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let mut cmd = Command::new(rustc);
    cmd.arg("--crate-type=bin")
        .arg("--target")
        .arg(env::var("TARGET").expect("cargo sets it"))
        .arg("-o")
        .arg(out_dir.join("link_probe"))
        .arg(&source);
    if let Ok(flags) = env::var("CARGO_ENCODED_RUSTFLAGS") {
        cmd.args(flags.split('\x1f').filter(|f| !f.is_empty()));
    }
    if let Some(linker) = env::var_os("RUSTC_LINKER") {
        cmd.arg("-C").arg(format!("linker={}", linker.to_string_lossy()));
    }
    for arg in args {
        cmd.arg("-C").arg(format!("link-arg={arg}"));
    }
    cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    cmd.status().is_ok_and(|s| s.success())
}
