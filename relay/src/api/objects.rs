//! Strata's own object verbs on the API: `POST /spaces/S/apply` (the one write path the
//! Kubernetes API shares, [`crate::kube::writes::admit`]), the deletes of manifests and
//! of one named object, and `GET /spaces/S/objects` with each object's summaries.

use hyper::StatusCode;
use serde_json::{Value, json};
use strata_node::objects::{Manifest, parse_manifests};
use strata_protocol::model::{ObjectKey, Space};
use strata_protocol::route::is_strata_object;
use strata_protocol::wire::{Change, ReportKey, ReportValue};

use super::paths::ObjectFilter;
use super::{ApiState, Body, error, reply, space_of};
use crate::kube::schema_check::FieldValidation;
use crate::kube::selector::LabelQuery;
use crate::kube::writes::admit::{Admission, WriteError, write_manifests};
use crate::tier::core::NodeCore;
use hyper::Response;

pub(super) async fn apply(state: &ApiState, space: &str, body: &[u8]) -> Response<Body> {
    let space = match space_of(space) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let manifests = match body_manifests(&space, body, "applied") {
        Ok(m) => m,
        Err(refused) => return *refused,
    };
    // What the API assigns (resourceVersion, uid, managedFields, status) is the root's:
    // output of `get -o yaml` applies again as it was written.
    let mut manifests = manifests;
    for m in &mut manifests {
        crate::kube::render::strip_assigned(&mut m.value);
    }
    let result = state
        .node
        .query(move |core: &mut NodeCore| {
            // Clusters first: what a Cluster's apply keeps of the inventory.
            let mut manifests = crate::kube::clusters::prepare_manifests(core, manifests)
                .map_err(|e| (StatusCode::UNPROCESSABLE_ENTITY, e))?;
            crate::kube::writes::admit::default_namespaces(core, &space, &mut manifests);
            // The Kubernetes API's write path: namespaces present, custom resources
            // checked against their CRDs as the Kubernetes API checks them.
            let admission = Admission {
                validation: FieldValidation::Warn,
                dry_run: false,
            };
            let written = write_manifests(core, &space, &mut manifests, admission).map_err(|e| match e {
                WriteError::NamespacesMissing(missing) => (
                    StatusCode::NOT_FOUND,
                    format!(
                        "nothing was applied: namespaces {} not found (apply the Namespace first, or in the same request)",
                        missing.join(", ")
                    ),
                ),
                WriteError::Invalid((_, status)) => (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    format!(
                        "nothing was applied: {}",
                        status["message"]
                            .as_str()
                            .map_or_else(|| status.to_string(), str::to_owned)
                    ),
                ),
                WriteError::NamespaceTerminating(key, ns) => (
                    StatusCode::FORBIDDEN,
                    format!(
                        "nothing was applied: {key}: unable to create new content in namespace {ns} because it is being terminated"
                    ),
                ),
                WriteError::Store(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
            })?;
            let warnings: Vec<String> = manifests
                .iter()
                .zip(&written.pruned)
                .flat_map(|(m, pruned)| {
                    let name = m.meta.key.to_string();
                    pruned
                        .iter()
                        .map(move |f| format!("{name}: unknown field {f:?} (dropped)"))
                })
                .collect();
            match written.applied {
                Some(a) => Ok((a, warnings)),
                None => Err((
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "a write that is not a dry run stored nothing".to_owned(),
                )),
            }
        })
        .await;
    match result {
        Some(Ok((a, warnings))) => {
            let names =
                |keys: &[ObjectKey]| keys.iter().map(ToString::to_string).collect::<Vec<_>>();
            reply(
                StatusCode::OK,
                json!({
                    "revision": a.revision.map(|p| p.0),
                    "applied": names(&a.applied),
                    "unchanged": names(&a.unchanged),
                    "warnings": warnings,
                }),
            )
        }
        Some(Err((code, e))) => error(code, e),
        None => error(StatusCode::SERVICE_UNAVAILABLE, "the node is stopping"),
    }
}

async fn delete_keys(state: &ApiState, keys: Vec<ObjectKey>) -> Response<Body> {
    let result = state
        .node
        .query(move |core: &mut NodeCore| {
            let present: Vec<ObjectKey> = keys
                .into_iter()
                .filter(|k| core.log().get(k).is_some())
                .collect();
            let present = crate::kube::namespaces::with_contents(core, present);
            let names: Vec<String> = present.iter().map(ToString::to_string).collect();
            if present.is_empty() {
                return Ok((None, names));
            }
            core.apply(present.into_iter().map(Change::Delete).collect())
                .map(|pos| (Some(pos.0), names))
        })
        .await;
    match result {
        Some(Ok((revision, deleted))) => reply(
            StatusCode::OK,
            json!({ "revision": revision, "deleted": deleted }),
        ),
        Some(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        None => error(StatusCode::SERVICE_UNAVAILABLE, "the node is stopping"),
    }
}

pub(super) async fn delete_manifests(state: &ApiState, space: &str, body: &[u8]) -> Response<Body> {
    let space = match space_of(space) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    match body_manifests(&space, body, "deleted") {
        Ok(m) => delete_keys(state, m.into_iter().map(|m| m.meta.key).collect()).await,
        Err(refused) => *refused,
    }
}

/// The manifests of a request's body (YAML) in `space`, or the 400 that refuses it
/// (the body is not UTF-8, or manifests do not parse: each named), saying that nothing
/// was `done`.
fn body_manifests(
    space: &Space,
    body: &[u8],
    done: &str,
) -> Result<Vec<Manifest>, Box<Response<Body>>> {
    let Ok(text) = std::str::from_utf8(body) else {
        return Err(Box::new(error(
            StatusCode::BAD_REQUEST,
            "the body is not UTF-8 YAML",
        )));
    };
    parse_manifests(text, space).map_err(|errors| {
        let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
        Box::new(reply(
            StatusCode::BAD_REQUEST,
            json!({ "error": format!("nothing was {done}"), "errors": errors }),
        ))
    })
}

pub(super) async fn delete_one(
    state: &ApiState,
    space: &str,
    filter: ObjectFilter,
) -> Response<Body> {
    let namespace_given = filter.namespace.clone();
    let space = match space_of(space) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let keys = state
        .node
        .query(move |core: &mut NodeCore| {
            core.log()
                .live()
                .map(|o| o.key().clone())
                .filter(|k| k.space == space && filter.matches(k))
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
    if keys.is_empty() {
        return error(StatusCode::NOT_FOUND, "no such object");
    }
    // Without a namespace, one name in several namespaces is ambiguous: deleting them
    // all would lose data the user did not name.
    let mut namespaces: Vec<&str> = keys.iter().filter_map(|k| k.namespace.as_deref()).collect();
    namespaces.sort_unstable();
    namespaces.dedup();
    if namespace_given.is_none() && namespaces.len() > 1 {
        return error(
            StatusCode::CONFLICT,
            format!(
                "{} exists in namespaces {}: name one with -n",
                keys[0].name,
                namespaces.join(", ")
            ),
        );
    }
    delete_keys(state, keys).await
}

/// Objects of a space that `filter` names, with their per-placement summaries; with
/// `single`, the one object (404 when there is none).
pub(super) async fn get_objects(
    state: &ApiState,
    space: &str,
    filter: ObjectFilter,
    labels: LabelQuery,
    single: bool,
) -> Response<Body> {
    let space = match space_of(space) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let objects = state
        .node
        .query(move |core: &mut NodeCore| {
            core.log()
                .live()
                .filter(|o| {
                    o.key().space == space
                        && filter.matches(o.key())
                        && labels.matches(&o.meta.labels)
                })
                .map(|o| {
                    let placements: Vec<Value> = core
                        .placements()
                        .iter()
                        .filter(|p| {
                            !is_strata_object(&o.meta) && p.selects_object(&o.meta)
                        })
                        .map(|p| {
                            let s = core.summary(p, o.key());
                            // What each child reported for its subtree.
                            let by_child: Vec<Value> = core
                                .reports()
                                .iter()
                                .filter_map(|((child, key), value)| match (key, value) {
                                    (
                                        ReportKey::Summary { placement, object },
                                        ReportValue::Summary(sum),
                                    ) if placement == &p.name && object == o.key() => Some(json!({
                                        "child": child,
                                        "summary": serde_json::to_value(sum).unwrap_or(Value::Null),
                                    })),
                                    _ => None,
                                })
                                .collect();
                            // With one cluster selected, that cluster's exact `.status`.
                            let exact = s.exact.as_ref().map(|e| {
                                json!({
                                    "cluster": e.cluster,
                                    "health": format!("{:?}", e.status.health),
                                    "revision": e.status.revision.0,
                                    "observedGeneration": e.status.observed_generation,
                                    "message": e.status.message,
                                    "status": serde_json::from_slice::<Value>(&e.status.status)
                                        .unwrap_or(Value::Null),
                                })
                            });
                            let mut summary = serde_json::to_value(&s).unwrap_or(Value::Null);
                            if let Some(obj) = summary.as_object_mut() {
                                obj.remove("exact");
                            }
                            json!({
                                "placement": p.name,
                                "summary": summary,
                                "userSummary": crate::placement_summary::of_object(p, &s),
                                "silent": s.silent(),
                                "by_child": by_child,
                                "exactStatus": exact,
                            })
                        })
                        .collect();
                    let body: Value = serde_json::from_slice(&o.body).unwrap_or(Value::Null);
                    let decisions =
                        crate::kube::render::decisions(core, &o.key().space, &o.key().name)
                            .filter(|_| strata_protocol::route::is_placement(&o.meta));
                    // A placement's own `statusSummary` values over the fleet.
                    let user_summary = core
                        .placements()
                        .iter()
                        .find(|p| strata_protocol::route::is_placement(&o.meta) && p.space == o.key().space && p.name == o.key().name)
                        .and_then(|p| crate::placement_summary::of_placement(core, p));
                    json!({
                        "decisions": decisions,
                        "userSummary": user_summary,
                        "key": {
                            "space": o.key().space.0, "group": o.key().group, "version": o.key().version,
                            "kind": o.key().kind, "namespace": o.key().namespace, "name": o.key().name,
                        },
                        "revision": o.revision.0,
                        "manifest": body,
                        "placements": placements,
                    })
                })
                .collect::<Vec<_>>()
        })
        .await;
    match objects {
        Some(items) if single => match items.into_iter().next() {
            Some(item) => reply(StatusCode::OK, item),
            None => error(StatusCode::NOT_FOUND, "no such object"),
        },
        Some(items) => reply(StatusCode::OK, json!({ "items": items })),
        None => error(StatusCode::SERVICE_UNAVAILABLE, "the node is stopping"),
    }
}
