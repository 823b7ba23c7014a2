//! What a node name may be, and label checks for the topology's messages.

/// Node names are DNS labels: they appear in certificates and in cluster paths, and
/// each names a directory under `nodes/` (see [`crate::files`]), which a name without
/// `/` or `.` cannot escape.
pub fn check_node_name(name: &str) -> Result<(), String> {
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
        Err(format!(
            "{name:?} is not a valid node name (1-63 characters of a-z, 0-9 and '-', not starting or ending with '-')"
        ))
    }
}
