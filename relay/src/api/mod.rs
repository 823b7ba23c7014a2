//! The root's user API: HTTPS with bearer tokens, JSON out, YAML manifests in.
//!
//! | method | path | what |
//! |---|---|---|
//! | POST | `/spaces/{space}/apply` | apply a multi-document YAML body (all or nothing) |
//! | POST | `/spaces/{space}/delete` | delete the objects a YAML body names |
//! | DELETE | `/spaces/{space}/objects/{kind}/{name}[?namespace=NS]` | delete one object |
//! | GET | `/spaces/{space}/objects?kind=K[&name=N][&namespace=NS]` | objects with per-placement summaries |
//! | any | `/spaces/{space}/{api,apis,version,openapi}/...`, and `/{api,apis,version,openapi}/...` for the space `default` | the Kubernetes API (see [`crate::kube`]) |
//! | GET | `/clusters` | the inventory, with each cluster's link state and last-seen |
//! | GET | `/status` | the tier tree: every link's state, lag and last heartbeat |
//! | GET | `/upsynced[?cluster=C]` | objects born on clusters that placements upsync, by cluster |
//!
//! Every request needs `Authorization: Bearer <token>` with a token from the tokens
//! file; nothing is served anonymously.

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use strata_protocol::model::{ObjectKey, Space};
use strata_protocol::route::is_placement;
use strata_protocol::wire::{Change, ReportKey, ReportValue};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::config::{ApiConfig, NodeConfig};
use crate::node::core::NodeCore;
use crate::node::runtime::NodeClient;
use strata_node::objects::parse_manifests;

pub mod paths;
mod tree;

use paths::ObjectFilter;
use strata_node::tls::{self, Identity};

/// A response body: one document, or a stream (a watch).
pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// Largest request body accepted.
pub const MAX_BODY: usize = 16 << 20;

struct Ctx {
    tokens: Vec<String>,
    node: NodeClient,
}

/// Starts serving the API; the returned task ends when aborted.
pub fn spawn(
    api: &ApiConfig,
    config: &NodeConfig,
    node: NodeClient,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let tokens: Vec<String> = std::fs::read_to_string(&api.tokens)
        .map_err(|e| anyhow::anyhow!("{}: cannot read the API tokens: {e}", api.tokens.display()))?
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    if tokens.is_empty() {
        anyhow::bail!(
            "{}: holds no token; the API serves no one anonymously",
            api.tokens.display()
        );
    }
    let identity = Identity::load(&config.tls.cert, &config.tls.key, &config.tls.ca)?;
    let acceptor = TlsAcceptor::from(tls::api_server_config(&identity)?);
    let std_listener = std::net::TcpListener::bind(api.listen)
        .map_err(|e| anyhow::anyhow!("cannot bind the API on {}: {e}", api.listen))?;
    std_listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(std_listener)?;
    tracing::info!(listen = %api.listen, "user API serving");
    let ctx = Arc::new(Ctx { tokens, node });
    Ok(tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            let Ok((tcp, peer)) = listener.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            let ctx = ctx.clone();
            conns.spawn(async move {
                let tls = match acceptor.accept(tcp).await {
                    Ok(t) => t,
                    Err(e) => {
                        tracing::debug!(%peer, error = %e, "API TLS handshake failed");
                        return;
                    }
                };
                let service = hyper::service::service_fn(move |req| {
                    let ctx = ctx.clone();
                    async move { Ok::<_, Infallible>(handle(req, &ctx).await) }
                });
                if let Err(e) = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await
                {
                    tracing::debug!(%peer, error = %e, "API connection ended");
                }
            });
            while conns.try_join_next().is_some() {}
        }
    }))
}

fn reply(status: StatusCode, body: Value) -> Response<Body> {
    let mut resp = Response::new(Full::new(Bytes::from(body.to_string())).boxed_unsync());
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    resp
}

fn error(status: StatusCode, message: impl Into<String>) -> Response<Body> {
    reply(status, json!({ "error": message.into() }))
}

async fn handle(req: Request<Incoming>, ctx: &Ctx) -> Response<Body> {
    let authorized = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| {
            ctx.tokens
                .iter()
                .any(|k| constant_time_eq(k.as_bytes(), t.as_bytes()))
        });
    if !authorized {
        // A metav1.Status, so that Kubernetes clients say what is wrong.
        let (_, status) = crate::kube::failure(
            401,
            "Unauthorized",
            "missing or unknown bearer token".into(),
            None,
        );
        return reply(StatusCode::UNAUTHORIZED, status);
    }
    let method = req.method().clone();
    let path: Vec<String> = req
        .uri()
        .path()
        .split('/')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    let query = parse_query(req.uri().query().unwrap_or(""));
    let headers = req.headers().clone();
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("body larger than {MAX_BODY} bytes or unreadable"),
            );
        }
    };
    let p: Vec<&str> = path.iter().map(String::as_str).collect();
    let kube = crate::kube::Request {
        method: method.as_str(),
        path: &p,
        query: &query,
        accept: header(&headers, hyper::header::ACCEPT),
        content_type: header(&headers, hyper::header::CONTENT_TYPE),
        body: &body,
    };
    match crate::kube::handle(&ctx.node, kube).await {
        Some(crate::kube::Reply::Json((code, value))) => {
            return reply(
                StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                value,
            );
        }
        Some(crate::kube::Reply::Watch(watch)) => {
            let watch = *watch;
            let mut resp =
                Response::new(BodyExt::boxed_unsync(StreamBody::new(watch.into_stream())));
            resp.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            );
            return resp;
        }
        None => {}
    }
    match (&method, p.as_slice()) {
        (&Method::POST, ["spaces", space, "apply"]) => apply(ctx, space, &body).await,
        (&Method::POST, ["spaces", space, "delete"]) => delete_manifests(ctx, space, &body).await,
        (&Method::DELETE, ["spaces", space, "objects", kind, name]) => {
            let filter = ObjectFilter {
                resource: Some((*kind).to_owned()),
                name: Some((*name).to_owned()),
                namespace: param(&query, "namespace").map(Some),
                ..ObjectFilter::default()
            };
            delete_one(ctx, space, filter).await
        }
        (&Method::GET, ["spaces", space, "objects"]) => {
            let filter = ObjectFilter {
                resource: param(&query, "kind"),
                name: param(&query, "name"),
                namespace: param(&query, "namespace").map(Some),
                ..ObjectFilter::default()
            };
            get_objects(ctx, space, filter, false).await
        }
        (&Method::GET, ["clusters"]) => tree::clusters(ctx).await,
        (&Method::GET, ["status"]) => tree::status(ctx).await,
        (&Method::GET, ["upsynced"]) => tree::upsynced(ctx, param(&query, "cluster")).await,
        _ => not_found(&method, &path),
    }
}

fn not_found(method: &Method, path: &[String]) -> Response<Body> {
    error(
        StatusCode::NOT_FOUND,
        format!("no such endpoint: {method} /{}", path.join("/")),
    )
}

fn header(headers: &hyper::HeaderMap, name: hyper::header::HeaderName) -> &str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|s| !s.is_empty())
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => (k.to_owned(), v.to_owned()),
            None => (kv.to_owned(), String::new()),
        })
        .collect()
}

fn space_of(space: &str) -> Result<Space, Box<Response<Body>>> {
    crate::config::check_node_name(space)
        .map(|()| Space(space.to_owned()))
        .map_err(|e| Box::new(error(StatusCode::BAD_REQUEST, format!("space: {e}"))))
}

async fn apply(ctx: &Ctx, space: &str, body: &[u8]) -> Response<Body> {
    let space = match space_of(space) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let text = match std::str::from_utf8(body) {
        Ok(t) => t,
        Err(_) => return error(StatusCode::BAD_REQUEST, "the body is not UTF-8 YAML"),
    };
    let manifests = match parse_manifests(text, &space) {
        Ok(m) => m,
        Err(errors) => {
            let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
            return reply(
                StatusCode::BAD_REQUEST,
                json!({ "error": "nothing was applied", "errors": errors }),
            );
        }
    };
    let result = ctx
        .node
        .query(move |core: &mut NodeCore| core.apply_manifests(&manifests))
        .await;
    match result {
        Some(Ok(a)) => {
            let names =
                |keys: &[ObjectKey]| keys.iter().map(ToString::to_string).collect::<Vec<_>>();
            reply(
                StatusCode::OK,
                json!({
                    "revision": a.revision.map(|p| p.0),
                    "applied": names(&a.applied),
                    "unchanged": names(&a.unchanged),
                }),
            )
        }
        Some(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        None => error(StatusCode::SERVICE_UNAVAILABLE, "the node is stopping"),
    }
}

async fn delete_keys(ctx: &Ctx, keys: Vec<ObjectKey>) -> Response<Body> {
    let result = ctx
        .node
        .query(move |core: &mut NodeCore| {
            let present: Vec<ObjectKey> = keys
                .into_iter()
                .filter(|k| core.log().get(k).is_some())
                .collect();
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

async fn delete_manifests(ctx: &Ctx, space: &str, body: &[u8]) -> Response<Body> {
    let space = match space_of(space) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let Ok(text) = std::str::from_utf8(body) else {
        return error(StatusCode::BAD_REQUEST, "the body is not UTF-8 YAML");
    };
    match parse_manifests(text, &space) {
        Ok(m) => delete_keys(ctx, m.into_iter().map(|m| m.meta.key).collect()).await,
        Err(errors) => {
            let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
            reply(
                StatusCode::BAD_REQUEST,
                json!({ "error": "nothing was deleted", "errors": errors }),
            )
        }
    }
}

async fn delete_one(ctx: &Ctx, space: &str, filter: ObjectFilter) -> Response<Body> {
    let namespace_given = filter.namespace.clone();
    let space = match space_of(space) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let keys = ctx
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
    delete_keys(ctx, keys).await
}

fn param(query: &[(String, String)], name: &str) -> Option<String> {
    query
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
}

/// Objects of a space that `filter` names, with their per-placement summaries; with
/// `single`, the one object (404 when there is none).
async fn get_objects(ctx: &Ctx, space: &str, filter: ObjectFilter, single: bool) -> Response<Body> {
    let space = match space_of(space) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let objects = ctx
        .node
        .query(move |core: &mut NodeCore| {
            core.log()
                .live()
                .filter(|o| o.key().space == space && filter.matches(o.key()))
                .map(|o| {
                    let placements: Vec<Value> = core
                        .placements()
                        .iter()
                        .filter(|p| !is_placement(&o.meta) && p.selects_object(&o.meta))
                        .map(|p| {
                            let s = core.reports().summarize(p, o.key());
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
                                "silent": s.silent(),
                                "by_child": by_child,
                                "exactStatus": exact,
                            })
                        })
                        .collect();
                    let body: Value = serde_json::from_slice(&o.body).unwrap_or(Value::Null);
                    json!({
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
