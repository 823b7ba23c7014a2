//! What rendering writes through: its error, the kind of process a node is, YAML
//! quoting, how a node's configuration names a file, and the write that leaves a file
//! alone when it already holds what would be written. [`crate::render`] and the targets
//! beside it ([`crate::helm`], [`crate::systemd`], [`crate::ports`]) all write this way.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use crate::certs::Action;
use crate::files::{self, ConfinementError};

/// Why the configs could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file that goes where the node runs (its Secret under `--helm`, its unit's
    /// directory under `--systemd`) could not be read.
    #[error(
        "node {node:?}: {path}: {source} (it goes where the node runs: run `relay topology certs` first)"
    )]
    SecretFile {
        /// The node.
        node: String,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// `ports.yaml` is not what render writes.
    #[error("{path}: {detail}")]
    Ports {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        detail: String,
    },
    /// A configuration would name what its node must not hold.
    #[error(transparent)]
    Confinement(#[from] ConfinementError),
    /// No free port could be found on an IP.
    #[error("no free port on {ip} for {what}: {source}")]
    NoPort {
        /// The IP.
        ip: IpAddr,
        /// What needed it (`center.listen`).
        what: String,
        /// Why.
        source: std::io::Error,
    },
}

/// What kind of process runs a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Process {
    /// `relay serve --config FILE`.
    Relay,
    /// `agent run --config FILE`.
    Agent,
}

/// How `node`'s configuration names `path`: relative to the configuration, quoted.
pub(crate) fn reference(dir: &Path, node: &str, path: &Path) -> String {
    let named = files::from_node_config(dir, node, path).unwrap_or_else(|| path.to_owned());
    quote(&named.to_string_lossy())
}

/// Creates `dir` and its parents.
pub(crate) fn mkdir(dir: &Path) -> Result<(), RenderError> {
    std::fs::create_dir_all(dir).map_err(|source| RenderError::Io {
        path: dir.to_owned(),
        source,
    })
}

/// `s` as a double-quoted YAML scalar, escaping quotes, backslashes and control
/// characters.
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Writes `text` to `path` unless it holds it already (see [`write_bytes_if_changed`]).
pub(crate) fn write_if_changed(path: &Path, text: &str) -> Result<(PathBuf, Action), RenderError> {
    write_bytes_if_changed(path, text.as_bytes(), false)
}

/// Writes `bytes` to `path` unless it holds them already; `private`: readable by its
/// owner only (0600; a key, or what holds one), whatever the file's mode was.
pub(crate) fn write_bytes_if_changed(
    path: &Path,
    bytes: &[u8],
    private: bool,
) -> Result<(PathBuf, Action), RenderError> {
    use std::os::unix::fs::PermissionsExt;
    let io = |source| RenderError::Io {
        path: path.to_owned(),
        source,
    };
    let action = match std::fs::read(path) {
        Ok(existing) if existing == bytes => Action::Kept,
        Ok(_) => Action::Replaced,
        Err(_) => Action::Created,
    };
    if action != Action::Kept {
        std::fs::write(path, bytes).map_err(io)?;
    }
    if private {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
    }
    Ok((path.to_owned(), action))
}
