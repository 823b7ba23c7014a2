//! What a node name may be, and label checks for the topology's messages.

/// A name that may not be used: which, what it is not, and the rule it breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name:?} is {what} ({rule})")]
pub struct NameError {
    /// The name as given.
    pub name: String,
    /// What it is (`not a valid node name`).
    pub what: &'static str,
    /// The rule it breaks.
    pub rule: &'static str,
}

/// Node names are DNS labels: they appear in certificates and in cluster paths, and
/// each names a directory under `nodes/` (see [`crate::files`]), which a name without
/// `/` or `.` cannot escape.
pub fn check_node_name(name: &str) -> Result<(), NameError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(NameError {
            name: name.to_owned(),
            what: "not a valid node name",
            rule: "1-63 characters of a-z, 0-9 and '-', not starting or ending with '-'",
        })
    }
}
