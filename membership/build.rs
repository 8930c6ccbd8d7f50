//! Compiles the wire schema with protox (pure Rust), so building needs no system `protoc`.

use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed=proto/convoke.proto");
    let fds = protox::compile(["proto/convoke.proto"], ["proto"])?;
    prost_build::Config::new().btree_map(["."]).compile_fds(fds)?;
    Ok(())
}
