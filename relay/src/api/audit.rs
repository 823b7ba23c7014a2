//! The audit trail of the user API: one JSON log line (target `audit`, see
//! `strata_node::process::AUDIT_TARGET`) for every write, allowed or refused, naming who
//! (the token's user), what (method, path, the objects the body names) and the outcome;
//! the line's `timestamp` says when. Reads are not audited.

use std::net::SocketAddr;

use hyper::{Method, StatusCode};
use serde_json::Value;

use super::auth::{Authn, Grant};

/// At most this many object names are listed per line (a large apply says how many
/// more there were).
const MAX_NAMES: usize = 50;

/// Logs one write through the API, by the user of `grant`.
pub(super) fn api_write(
    grant: &Grant,
    method: &Method,
    path: &[&str],
    body: &[u8],
    code: StatusCode,
) {
    let (objects, more) = named_objects(body);
    let user = &grant.user;
    tracing::info!(
        target: "audit",
        who = %user,
        authn = %grant.via,
        groups = %grant.groups.join(","),
        action = "api-write",
        method = %method,
        path = %format!("/{}", path.join("/")),
        objects = %objects.join(", "),
        more_objects = more,
        status = code.as_u16(),
        allowed = code != StatusCode::FORBIDDEN,
        "{user} {method} /{}: {}",
        path.join("/"),
        code.as_u16()
    );
}

/// Logs a client certificate or an ID token that was refused (`status` 401), or whose
/// user no rule maps to a role (403); `who` is the user it named, if it named one.
pub(super) fn authn_refused(via: Authn, who: &str, peer: SocketAddr, status: u16, why: &str) {
    tracing::info!(
        target: "audit",
        who = %who,
        authn = %via,
        action = "authn-refused",
        peer = %peer,
        status,
        error = %why,
        "{via} authentication of {who:?} from {peer} refused ({status}): {why}"
    );
}

/// Logs the first request of a user of a client certificate or an ID token on one
/// connection (a token's requests are its writes, [`api_write`]).
pub(super) fn authn_accepted(grant: &Grant, peer: SocketAddr) {
    tracing::info!(
        target: "audit",
        who = %grant.user,
        authn = %grant.via,
        groups = %grant.groups.join(","),
        role = ?grant.role,
        action = "authn",
        peer = %peer,
        "{} authenticated by {} from {peer} (groups {}, role {:?})",
        grant.user,
        grant.via,
        grant.groups.join(","),
        grant.role
    );
}

/// Logs a login code given for the web view (`relay ui`).
pub(super) fn ui_code(user: &str) {
    tracing::info!(target: "audit", who = %user, action = "ui-login-code", "{user} asked for a web view login code");
}

/// Logs a login code traded for a web view session.
pub(super) fn ui_login(user: &str) {
    tracing::info!(target: "audit", who = %user, action = "ui-login", "{user} logged in to the web view");
}

/// `Kind namespace/name` of every object a JSON or YAML body names (nothing for a
/// patch or anything else that names no object), and how many were left off.
pub(super) fn named_objects(body: &[u8]) -> (Vec<String>, usize) {
    let Ok(text) = std::str::from_utf8(body) else {
        return (Vec::new(), 0);
    };
    let docs: Vec<Value> = match serde_json::from_str::<Value>(text) {
        Ok(v) => vec![v],
        Err(_) => strata_manifest::yaml::from_multiple(text).unwrap_or_default(),
    };
    let mut names: Vec<String> = docs
        .iter()
        .flat_map(|d| match d["items"].as_array() {
            Some(items) if d["kind"].as_str().is_some_and(|k| k.ends_with("List")) => {
                items.iter().collect::<Vec<_>>()
            }
            _ => vec![d],
        })
        .filter_map(|d| {
            let kind = d["kind"].as_str()?;
            let name = d["metadata"]["name"].as_str()?;
            Some(match d["metadata"]["namespace"].as_str() {
                Some(ns) => format!("{kind} {ns}/{name}"),
                None => format!("{kind} {name}"),
            })
        })
        .collect();
    let more = names.len().saturating_sub(MAX_NAMES);
    names.truncate(MAX_NAMES);
    (names, more)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_name_their_objects() {
        let yaml = b"kind: Deployment\nmetadata: { name: shop, namespace: web }\n---\nkind: Namespace\nmetadata: { name: web }\n";
        assert_eq!(
            named_objects(yaml),
            (
                vec!["Deployment web/shop".into(), "Namespace web".into()],
                0
            )
        );
        let json = br#"{"kind":"ConfigMap","metadata":{"name":"c"}}"#;
        assert_eq!(named_objects(json).0, vec!["ConfigMap c".to_owned()]);
        // A patch names no object (the path does).
        assert_eq!(named_objects(br#"{"spec":{"replicas":3}}"#).0.len(), 0);
        assert_eq!(named_objects(b"\xff").0.len(), 0);
        let many: String = (0..60)
            .map(|i| format!("---\nkind: ConfigMap\nmetadata: {{ name: c{i} }}\n"))
            .collect();
        assert_eq!(named_objects(many.as_bytes()).1, 10);
    }
}
