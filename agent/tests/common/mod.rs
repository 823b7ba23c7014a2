//! Helpers shared by the tests that run the binaries.

#![allow(dead_code, unreachable_pub, missing_docs)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::Once;

static RELAY_BUILT: Once = Once::new();

/// The path of one of the workspace's binaries. The `relay` binary belongs to another
/// package, which `cargo test -p strata-agent` does not rebuild: build it (a no-op when
/// it is fresh) so a test never runs a stale binary.
pub fn bin(name: &str) -> PathBuf {
    let agent = PathBuf::from(env!("CARGO_BIN_EXE_agent"));
    if name == "relay" {
        RELAY_BUILT.call_once(|| {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let status = Command::new(cargo)
                .args(["build", "-p", "strata-relay", "--bin", "relay"])
                .status()
                .unwrap();
            assert!(status.success(), "could not build the relay binary");
        });
    }
    agent.with_file_name(name)
}
