//! `POST /revocations/{name}` and `GET /revocations`: the root's record of revoked
//! nodes (see `crate::tier::core`'s revocations).

use hyper::{Response, StatusCode};
use serde_json::{Value, json};

use super::auth::{Grant, Role};
use super::{ApiState, Body, error, reply};
use crate::tier::core::NodeCore;

/// Revokes `name`: an admin's write, recorded durably in the root's log.
pub(super) async fn revoke(
    state: &ApiState,
    grant: &Grant,
    name: &str,
    body: &[u8],
) -> Response<Body> {
    if grant.role != Role::Admin {
        return error(
            StatusCode::FORBIDDEN,
            format!("user {:?} is not an admin: only admins revoke", grant.user),
        );
    }
    if let Err(e) = crate::config::check_node_name(name) {
        return error(StatusCode::BAD_REQUEST, format!("name: {e}"));
    }
    let reason = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v["reason"].as_str().map(str::to_owned))
        .unwrap_or_default();
    let (who, target, why) = (grant.user.clone(), name.to_owned(), reason.clone());
    let result = state
        .node
        .query(move |core: &mut NodeCore| {
            if core.parent_link().is_some() {
                return Err("only the root records revocations".to_owned());
            }
            core.revoke(&target, &who, &why).map_err(|e| e.to_string())
        })
        .await;
    match result {
        Some(Ok(revision)) => {
            tracing::info!(
                target: "audit",
                who = %grant.user,
                action = "revoked",
                node = %name,
                reason = %reason,
                new = revision.is_some(),
                "{} revoked {name:?}",
                grant.user
            );
            reply(
                StatusCode::OK,
                json!({ "revoked": name, "revision": revision.map(|p| p.0) }),
            )
        }
        Some(Err(e)) => error(StatusCode::CONFLICT, e),
        None => error(StatusCode::SERVICE_UNAVAILABLE, "the node is stopping"),
    }
}

/// The names revoked at the root.
pub(super) async fn list(state: &ApiState) -> Response<Body> {
    let names = state
        .node
        .query(|core: &mut NodeCore| core.revoked().map(str::to_owned).collect::<Vec<_>>())
        .await;
    match names {
        Some(names) => reply(StatusCode::OK, json!({ "items": names })),
        None => error(StatusCode::SERVICE_UNAVAILABLE, "the node is stopping"),
    }
}
