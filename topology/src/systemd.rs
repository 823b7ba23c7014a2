//! What `relay topology render --systemd` writes for each node: `nodes/NAME/systemd/`,
//! the configuration directory of the node's unit as the host sees it (its
//! configuration naming every file beside itself, those files, the root's API tokens
//! and a cluster's kubeconfig included, and the store at `data`, where the unit mounts
//! its state directory), and the unit itself, `nodes/NAME/strata-relay.service` or
//! `strata-agent.service` (`deploy/systemd/`). Installing a node is two copies:
//!
//! ```text
//! install -d -m 0750 /etc/strata && cp -r DIR/nodes/NAME/systemd/. /etc/strata/
//! cp DIR/nodes/NAME/strata-relay.service /etc/systemd/system/
//! ```
//!
//! (`/etc/strata-agent/` and `strata-agent.service` for a cluster's agent.)

use std::path::{Path, PathBuf};

use crate::certs::Action;
use crate::files;
use crate::output::{Process, RenderError, mkdir, write_bytes_if_changed, write_if_changed};

/// The relay's unit (`deploy/systemd/strata-relay.service`).
pub const RELAY_UNIT: &str = include_str!("../../deploy/systemd/strata-relay.service");
/// The agent's unit (`deploy/systemd/strata-agent.service`).
pub const AGENT_UNIT: &str = include_str!("../../deploy/systemd/strata-agent.service");

/// The unit's file name for a process.
pub fn unit_name(process: Process) -> &'static str {
    match process {
        Process::Relay => "strata-relay.service",
        Process::Agent => "strata-agent.service",
    }
}

/// Writes `node`'s unit configuration directory (`config`, and each of `held` (name,
/// source) copied beside it, readable by its owner only) and its unit.
pub(crate) fn write(
    dir: &Path,
    node: &str,
    process: Process,
    config: &str,
    held: &[(String, PathBuf)],
) -> Result<Vec<(PathBuf, Action)>, RenderError> {
    let out = files::node_systemd(dir, node);
    mkdir(&out)?;
    let mut written = vec![write_if_changed(&out.join("config.yaml"), config)?];
    for (name, source) in held {
        let bytes = std::fs::read(source).map_err(|source_error| RenderError::SecretFile {
            node: node.to_owned(),
            path: source.clone(),
            source: source_error,
        })?;
        written.push(write_bytes_if_changed(&out.join(name), &bytes, true)?);
    }
    let unit = match process {
        Process::Relay => RELAY_UNIT,
        Process::Agent => AGENT_UNIT,
    };
    let path = files::node_dir(dir, node).join(unit_name(process));
    written.push(write_if_changed(&path, unit)?);
    Ok(written)
}
