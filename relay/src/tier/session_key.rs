//! The key a child's session is kept under (its node name, or `name#replica`), below
//! the core and the reports that both read it.

/// The separator between a node name and a replica id in a session key. Node names are
/// DNS labels and replica ids `[a-z0-9-]`, so neither contains it.
pub(crate) const REPLICA_SEPARATOR: char = '#';

/// The key a child's session, acks, run and reports are kept under: its node name, or
/// `name#replica` for one replica of a replicated child, so that the replicas of one
/// node never take each other's session over.
pub fn session_key(name: &str, replica: Option<&str>) -> String {
    match replica {
        Some(r) => format!("{name}{REPLICA_SEPARATOR}{r}"),
        None => name.to_owned(),
    }
}

/// The node name of a session key.
pub fn node_of(key: &str) -> &str {
    key.split_once(REPLICA_SEPARATOR).map_or(key, |(n, _)| n)
}
