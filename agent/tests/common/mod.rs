//! Helpers shared by the tests that run the binaries.

#![allow(dead_code, unreachable_pub, missing_docs)]

use std::path::PathBuf;
use std::process::Command;

/// The path of one of the workspace's binaries, built if a narrow test run did not.
pub fn bin(name: &str) -> PathBuf {
    let agent = PathBuf::from(env!("CARGO_BIN_EXE_agent"));
    let path = agent.with_file_name(name);
    if name != "agent" && !path.exists() {
        // `cargo test --workspace` builds every binary; a narrower run may not have.
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "-p", "strata-relay", "--bin", "relay"])
            .status()
            .unwrap();
        assert!(status.success(), "could not build the relay binary");
    }
    path
}
