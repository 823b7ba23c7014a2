//! Where `relay topology certs` and `render` (and `relay up`) put every file, and the
//! check that a node's configuration references nothing it must not hold.
//!
//! The hierarchy's own files sit at the top of the output directory; each node gets a
//! directory of its own under `nodes/`, whose file names never depend on the node's
//! name. A node name is a DNS label (no `/`, no `.`: see [`crate::names`]), so it names
//! exactly one directory under `nodes/` and can collide with no generated file, whatever
//! it is (`ca`, `ports`, `api`, `nodes`, `join`...).
//!
//! ```text
//! DIR/
//!   ca.crt          the CA certificate every node trusts
//!   ca.key          the CA key (only when generated here); never in a node's directory
//!   api.tokens      the bearer tokens the root's API accepts
//!   ports.yaml      ports assigned by `render`
//!   logs/NAME.log   `relay up` only
//!   nodes/NAME/     everything node NAME needs, and nothing else's secret:
//!     config.yaml   its `relay serve` / `agent run` configuration
//!     node.crt      its certificate (chain), naming NAME
//!     node.key      its key
//!     ca.crt        a copy of DIR/ca.crt
//!     data/         its store
//!     join.tokens   a relay with a `joining:` entry: its single-use join tokens,
//!     join-ca.crt   the intermediate CA it signs joining agents' certificates with,
//!     join-ca.key   and that CA's key
//!     values.yaml   `render --helm`: the node's Helm values (its pod's configuration)
//!     secret.yaml   `render --helm`: its Secret manifest (every file that names)
//!     systemd/      `render --systemd`: its unit's configuration directory
//!     strata-relay.service (or strata-agent.service): `render --systemd`: its unit
//! ```
//!
//! A node's directory can be copied as is to the host that runs it; the root's
//! configuration also names `../../api.tokens`, the hierarchy's API tokens.

use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

use crate::names::check_node_name;

/// The CA certificate every node trusts.
pub fn ca_cert(dir: &Path) -> PathBuf {
    dir.join("ca.crt")
}

/// The CA key (only when the CA was generated here).
pub fn ca_key(dir: &Path) -> PathBuf {
    dir.join("ca.key")
}

/// The bearer tokens the root's API accepts, one per line.
pub fn api_tokens(dir: &Path) -> PathBuf {
    dir.join("api.tokens")
}

/// The ports `render` assigned, kept so that re-rendering gives the same files.
pub fn ports(dir: &Path) -> PathBuf {
    dir.join("ports.yaml")
}

/// Where `relay up` writes each process's standard error.
pub fn logs(dir: &Path) -> PathBuf {
    dir.join("logs")
}

/// The log of node `node` under `relay up`.
pub fn node_log(dir: &Path, node: &str) -> PathBuf {
    logs(dir).join(format!("{node}.log"))
}

/// The directory holding one directory per node.
pub fn nodes(dir: &Path) -> PathBuf {
    dir.join("nodes")
}

/// A node's own directory.
pub fn node_dir(dir: &Path, node: &str) -> PathBuf {
    nodes(dir).join(node)
}

/// A node's configuration file (`relay serve --config` or `agent run --config`).
pub fn node_config(dir: &Path, node: &str) -> PathBuf {
    node_dir(dir, node).join("config.yaml")
}

/// A node's certificate.
pub fn node_cert(dir: &Path, node: &str) -> PathBuf {
    node_dir(dir, node).join("node.crt")
}

/// A node's key.
pub fn node_key(dir: &Path, node: &str) -> PathBuf {
    node_dir(dir, node).join("node.key")
}

/// A node's copy of the CA certificate.
pub fn node_ca_cert(dir: &Path, node: &str) -> PathBuf {
    node_dir(dir, node).join("ca.crt")
}

/// A node's Helm values for `deploy/helm/strata` (`render --helm`).
pub fn node_helm_values(dir: &Path, node: &str) -> PathBuf {
    node_dir(dir, node).join("values.yaml")
}

/// A node's Secret manifest, the files its Helm values' configuration names
/// (`render --helm`).
pub fn node_helm_secret(dir: &Path, node: &str) -> PathBuf {
    node_dir(dir, node).join("secret.yaml")
}

/// The configuration directory of a node's systemd unit (`render --systemd`): its
/// configuration and every file it names, side by side.
pub fn node_systemd(dir: &Path, node: &str) -> PathBuf {
    node_dir(dir, node).join("systemd")
}

/// A node's store.
pub fn node_data(dir: &Path, node: &str) -> PathBuf {
    node_dir(dir, node).join("data")
}

/// The certificate the root's user API serves (the names clients reach it by).
pub fn api_cert(dir: &Path, root: &str) -> PathBuf {
    node_dir(dir, root).join("api.crt")
}

/// Its key.
pub fn api_key(dir: &Path, root: &str) -> PathBuf {
    node_dir(dir, root).join("api.key")
}

/// The names `api.crt` carries, one per line: a certificate is issued again (for the
/// same key) when they change.
pub fn api_names(dir: &Path, root: &str) -> PathBuf {
    node_dir(dir, root).join("api.names")
}

/// The single-use join tokens a relay admits, one per line.
pub fn join_tokens(dir: &Path, relay: &str) -> PathBuf {
    node_dir(dir, relay).join("join.tokens")
}

/// The intermediate CA certificate a relay signs joining agents' certificates with.
pub fn join_ca_cert(dir: &Path, relay: &str) -> PathBuf {
    node_dir(dir, relay).join("join-ca.crt")
}

/// Its key.
pub fn join_ca_key(dir: &Path, relay: &str) -> PathBuf {
    node_dir(dir, relay).join("join-ca.key")
}

/// How node `node`'s configuration names `path` (a file of its own directory, or of the
/// output directory's top): relative to the configuration's directory. `None` for a path
/// outside the output directory.
pub fn from_node_config(dir: &Path, node: &str, path: &Path) -> Option<PathBuf> {
    if let Ok(own) = path.strip_prefix(node_dir(dir, node)) {
        return Some(own.to_owned());
    }
    // The configuration is two levels below the top: DIR/nodes/NAME/config.yaml.
    let top = path.strip_prefix(dir).ok()?;
    Some(Path::new("..").join("..").join(top))
}

/// A node's configuration that references what the node must not hold.
#[derive(Debug, thiserror::Error)]
pub enum ConfinementError {
    /// The node's name cannot name a directory of its own.
    #[error("node {node:?}: {reason}")]
    BadName {
        /// The name.
        node: String,
        /// Why.
        reason: crate::names::NameError,
    },
    /// A file the node would be given is the CA's private key.
    #[error("node {node:?}: {field} ({path}) is the CA's private key")]
    CaKey {
        /// The node.
        node: String,
        /// The configuration field or the file's role (`tls.key`).
        field: String,
        /// The file.
        path: PathBuf,
    },
    /// A file only the node may hold is not in its own directory.
    #[error("node {node:?}: {field} ({path}) is outside the node's directory {dir}")]
    Outside {
        /// The node.
        node: String,
        /// The configuration field.
        field: String,
        /// The file.
        path: PathBuf,
        /// The node's directory.
        dir: PathBuf,
    },
    /// A file is in another node's directory.
    #[error("node {node:?}: {field} ({path}) is in the directory of node {other:?}")]
    OtherNode {
        /// The node.
        node: String,
        /// The configuration field.
        field: String,
        /// The file.
        path: PathBuf,
        /// The node whose directory it is in.
        other: String,
    },
    /// The CA key given to issue with lies in a node's directory, which goes to that node.
    #[error("the CA key {path} is in the directory of node {node:?}, which is shipped to it")]
    CaKeyShipped {
        /// The CA key.
        path: PathBuf,
        /// The node.
        node: String,
    },
    /// A rendered configuration does not read back (a bug of `render`).
    #[error("node {node:?}: the rendered configuration does not parse: {detail}")]
    Unreadable {
        /// The node.
        node: String,
        /// The parser's message.
        detail: String,
    },
}

/// Whom a file a node references may belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// Only this node: it must be in the node's own directory (keys, tokens, store).
    Node,
    /// Shared by the hierarchy (the CA certificate, the root's API tokens): anywhere but
    /// another node's directory.
    Hierarchy,
}

/// Checks that a file `node` is given or referenced (`field` names it in errors) is not
/// the CA key, is in no other node's directory and, when only the node may hold it, is
/// in the node's own directory. Paths are compared after resolving `.` and `..`.
pub fn check_reference(
    dir: &Path,
    node: &str,
    field: &str,
    path: &Path,
    holder: Holder,
) -> Result<(), ConfinementError> {
    check_node_name(node).map_err(|reason| ConfinementError::BadName {
        node: node.to_owned(),
        reason,
    })?;
    let resolved = lexical(path);
    let own = lexical(&node_dir(dir, node));
    if resolved == lexical(&ca_key(dir)) {
        return Err(ConfinementError::CaKey {
            node: node.to_owned(),
            field: field.to_owned(),
            path: path.to_owned(),
        });
    }
    if resolved.starts_with(&own) {
        return Ok(());
    }
    if let Ok(rest) = resolved.strip_prefix(lexical(&nodes(dir)))
        && let Some(Component::Normal(other)) = rest.components().next()
    {
        return Err(ConfinementError::OtherNode {
            node: node.to_owned(),
            field: field.to_owned(),
            path: path.to_owned(),
            other: other.to_string_lossy().into_owned(),
        });
    }
    match holder {
        Holder::Hierarchy => Ok(()),
        Holder::Node => Err(ConfinementError::Outside {
            node: node.to_owned(),
            field: field.to_owned(),
            path: path.to_owned(),
            dir: node_dir(dir, node),
        }),
    }
}

/// Checks that a CA key given from elsewhere is in no node's directory.
pub fn check_ca_key_source(dir: &Path, key: &Path) -> Result<(), ConfinementError> {
    let resolved = lexical(key);
    match resolved.strip_prefix(lexical(&nodes(dir))) {
        Ok(rest) => match rest.components().next() {
            Some(Component::Normal(node)) => Err(ConfinementError::CaKeyShipped {
                path: key.to_owned(),
                node: node.to_string_lossy().into_owned(),
            }),
            _ => Ok(()),
        },
        Err(_) => Ok(()),
    }
}

/// The files a rendered configuration names, read back from its text (fields the
/// renderer does not write are ignored).
#[derive(Deserialize)]
struct Named {
    tls: Option<NamedTls>,
    join: Option<NamedJoin>,
    api: Option<NamedApi>,
    data: Option<PathBuf>,
}

#[derive(Deserialize)]
struct NamedTls {
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
}

#[derive(Deserialize)]
struct NamedJoin {
    tokens: PathBuf,
    ca_cert: PathBuf,
    ca_key: PathBuf,
}

#[derive(Deserialize)]
struct NamedApi {
    tokens: PathBuf,
}

/// Reads back a configuration rendered for `node` (as written to
/// [`node_config`]) and checks every file it names with [`check_reference`]: keys,
/// certificates, tokens and the store in the node's own directory, the CA certificate
/// and the API tokens anywhere but another node's directory, and nothing the CA key.
pub fn check_rendered(dir: &Path, node: &str, text: &str) -> Result<(), ConfinementError> {
    let named: Named = serde_saphyr::from_str(text).map_err(|e| ConfinementError::Unreadable {
        node: node.to_owned(),
        detail: e.to_string(),
    })?;
    let base = node_dir(dir, node);
    let mut refs: Vec<(&str, &Path, Holder)> = Vec::new();
    if let Some(tls) = &named.tls {
        refs.push(("tls.cert", &tls.cert, Holder::Node));
        refs.push(("tls.key", &tls.key, Holder::Node));
        refs.push(("tls.ca", &tls.ca, Holder::Hierarchy));
    }
    if let Some(join) = &named.join {
        refs.push(("join.tokens", &join.tokens, Holder::Node));
        refs.push(("join.ca_cert", &join.ca_cert, Holder::Node));
        refs.push(("join.ca_key", &join.ca_key, Holder::Node));
    }
    if let Some(api) = &named.api {
        refs.push(("api.tokens", &api.tokens, Holder::Hierarchy));
    }
    if let Some(data) = &named.data {
        refs.push(("data", data, Holder::Node));
    }
    for (field, path, holder) in refs {
        check_reference(dir, node, field, &base.join(path), holder)?;
    }
    Ok(())
}

/// `path` with `.` and `..` resolved without touching the file system.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => match out.components().next_back() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                // The root's parent is the root.
                Some(Component::RootDir | Component::Prefix(_)) => {}
                _ => out.push(".."),
            },
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // unit tests may unwrap

    use super::*;

    const DIR: &str = "/out";

    fn check(node: &str, path: &str, holder: Holder) -> Result<(), ConfinementError> {
        check_reference(Path::new(DIR), node, "f", Path::new(path), holder)
    }

    #[test]
    fn a_node_named_like_a_generated_file_gets_its_own_directory() {
        let dir = Path::new(DIR);
        for node in ["ca", "ports", "api", "nodes", "join", "logs", "data"] {
            let own = node_dir(dir, node);
            for file in [
                node_cert(dir, node),
                node_key(dir, node),
                node_config(dir, node),
                join_ca_key(dir, node),
            ] {
                assert!(file.starts_with(&own), "{}", file.display());
                for top in [ca_cert(dir), ca_key(dir), api_tokens(dir), ports(dir)] {
                    assert_ne!(file, top);
                }
            }
        }
    }

    #[test]
    fn references_are_relative_to_the_nodes_configuration() {
        let dir = Path::new(DIR);
        assert_eq!(
            from_node_config(dir, "ca", &node_key(dir, "ca")).unwrap(),
            Path::new("node.key")
        );
        assert_eq!(
            from_node_config(dir, "ca", &api_tokens(dir)).unwrap(),
            Path::new("../../api.tokens")
        );
        assert_eq!(from_node_config(dir, "ca", Path::new("/etc/x")), None);
    }

    #[test]
    fn the_ca_key_and_other_nodes_files_are_refused() {
        assert!(matches!(
            check("ca", "/out/ca.key", Holder::Hierarchy),
            Err(ConfinementError::CaKey { .. })
        ));
        assert!(matches!(
            check("ca", "/out/nodes/ca/../../ca.key", Holder::Node),
            Err(ConfinementError::CaKey { .. })
        ));
        match check("eu", "/out/nodes/us/node.key", Holder::Hierarchy) {
            Err(ConfinementError::OtherNode { other, .. }) => assert_eq!(other, "us"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            check("eu", "/out/ca.crt", Holder::Node),
            Err(ConfinementError::Outside { .. })
        ));
        assert!(matches!(
            check("..", "/out/nodes/../x.key", Holder::Node),
            Err(ConfinementError::BadName { .. })
        ));
        check("eu", "/out/nodes/eu/node.key", Holder::Node).unwrap();
        check("eu", "/out/nodes/eu/./data", Holder::Node).unwrap();
        check("eu", "/out/ca.crt", Holder::Hierarchy).unwrap();
    }

    #[test]
    fn lexical_resolution_never_climbs_above_where_it_starts() {
        assert_eq!(lexical(Path::new("/a/../../b")), Path::new("/b"));
        assert_eq!(lexical(Path::new("../../b")), Path::new("../../b"));
        assert_eq!(lexical(Path::new("./a/./b/../c")), Path::new("a/c"));
    }

    #[test]
    fn a_given_ca_key_in_a_nodes_directory_is_refused() {
        let dir = Path::new(DIR);
        assert!(check_ca_key_source(dir, Path::new("/out/nodes/eu/ca.key")).is_err());
        check_ca_key_source(dir, Path::new("/out/ca.key")).unwrap();
        check_ca_key_source(dir, Path::new("/secrets/ca.key")).unwrap();
    }

    #[test]
    fn a_rendered_configuration_naming_the_ca_key_is_refused() {
        let dir = Path::new(DIR);
        let old = "node: ca\ntls: { cert: ca.crt, key: ../../ca.key, ca: ca.crt }\ndata: data\n";
        assert!(matches!(
            check_rendered(dir, "ca", old),
            Err(ConfinementError::CaKey { field, .. }) if field == "tls.key"
        ));
        let ok = "node: ca\ntls: { cert: node.crt, key: node.key, ca: ca.crt }\ndata: data\napi: { listen: \"127.0.0.1:1\", tokens: ../../api.tokens }\n";
        check_rendered(dir, "ca", ok).unwrap();
    }
}
