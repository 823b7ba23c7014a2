//! The topology YAML schema, its validation with precise messages, certificate issuance
//! and per-node configuration rendering.
//!
//! A topology file describes a whole hierarchy: the root, relays at any depth with their
//! parents and listen addresses, labels that clusters below inherit, the leaf clusters,
//! and where agents not listed may join with a token. It is read into raw serde structs
//! that refuse unknown fields ([`raw`]), then compiled in one pass that reports every
//! error at once, each naming the node and the fault ([`compile()`]).
//!
//! # Layout
//!
//! * [`raw`]: the document as written.
//! * [`compile`](mod@compile): checks, and the [`Topology`] it yields.
//! * [`names`]: what a node name may be.
//! * [`files`]: where every generated file goes (a directory per node under `nodes/`,
//!   so no node name can collide with a file of the hierarchy), and the check that no
//!   node is given the CA key or another node's file.
//! * [`certs`]: the CA, node certificates and join tokens (rcgen), written once.
//! * [`render`]: each node's `relay serve` / `agent run` configuration file.
//! * [`ports`]: ports assigned on first render, kept.
//! * [`helm`]: each node's Helm values and Secret manifest (`render --helm`).
//! * [`systemd`]: each node's unit and its configuration directory (`render --systemd`).
//! * `output`: what the four above write through (the render error, YAML quoting, a
//!   file written only when it changes).
//! * `layout`: how a configuration names its node's files in each of these.

use std::path::{Path, PathBuf};

pub mod certs;
pub mod compile;
pub mod files;
pub mod helm;
mod layout;
pub mod names;
mod output;
pub mod ports;
pub mod raw;
pub mod render;
pub mod systemd;

pub use compile::{Addr, Cluster, ClusterBackend, Diagnostics, Dns, Relay, Topology, compile};

/// A topology that compiled, with its warnings.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The topology.
    pub topology: Topology,
    /// Warnings (it was accepted regardless).
    pub warnings: Vec<String>,
}

/// Why a topology file was refused.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("{path}: cannot read the topology: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not YAML of the topology's shape (an unknown field, a wrong type).
    #[error("{path}: {detail}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, with line and column.
        detail: String,
    },
    /// The file parsed, but the hierarchy it describes is wrong; every error is listed.
    #[error("{path}: {} error(s):\n  {}", errors.len(), errors.join("\n  "))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Each error.
        errors: Vec<String>,
        /// Warnings found on the way.
        warnings: Vec<String>,
    },
}

/// Parses and compiles topology text (`path` only names it in errors).
pub fn parse(text: &str, path: &Path) -> Result<Checked, LoadError> {
    let raw: raw::RawTopology = serde_saphyr::from_str(text).map_err(|e| {
        // The parser names the field and the line; a list entry is named too, so that
        // a fault in one of 3,000 clusters says which.
        let entry = e
            .location()
            .and_then(|l| usize::try_from(l.line()).ok())
            .and_then(|line| entry_at(text, line));
        LoadError::Parse {
            path: path.to_owned(),
            detail: match entry {
                Some((list, name)) => format!("{list} entry {name:?}: {e}"),
                None => e.to_string(),
            },
        }
    })?;
    match compile(raw) {
        (Some(topology), d) => Ok(Checked {
            topology,
            warnings: d.warnings,
        }),
        (None, d) => Err(LoadError::Invalid {
            path: path.to_owned(),
            errors: d.errors,
            warnings: d.warnings,
        }),
    }
}

/// The list (`relays`, `clusters`) and `name` of the entry of `spec` that line `line`
/// (from 1) of `text` falls in, when it falls in one that has a name.
fn entry_at(text: &str, line: usize) -> Option<(&str, &str)> {
    let lines: Vec<&str> = text.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let at = line.checked_sub(1).filter(|&i| i < lines.len())?;
    // The entry starts at the nearest `- ` at or above the line.
    let start = (0..=at)
        .rev()
        .find(|&i| lines[i].trim_start().starts_with("- "))?;
    let depth = indent(lines[start]);
    // Its name: on its first line or a line of the entry below it.
    let name = lines[start..]
        .iter()
        .enumerate()
        .take_while(|(k, l)| *k == 0 || indent(l) > depth)
        .find_map(|(_, l)| {
            let after = &l[l.find("name:")? + "name:".len()..];
            let value = after
                .trim_start()
                .split([',', '}', '#'])
                .next()?
                .trim()
                .trim_matches(['"', '\'']);
            (!value.is_empty()).then_some(value)
        })?;
    // The list it belongs to: the nearest key above that is not an entry of it.
    let list = lines[..start]
        .iter()
        .rev()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .find(|l| indent(l) < depth || (indent(l) == depth && !l.trim_start().starts_with("- ")))
        .map(|l| l.trim().trim_end_matches(':'))
        .filter(|k| ["relays", "clusters", "joining"].contains(k))?;
    Some((list, name))
}

/// Reads, parses and compiles a topology file.
pub fn load(path: &Path) -> Result<Checked, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse(&text, path)
}
