//! The root's user API: HTTPS with bearer tokens, JSON out, YAML manifests in.
//!
//! | method | path | what |
//! |---|---|---|
//! | POST | `/spaces/{space}/apply` | apply a multi-document YAML body (all or nothing) |
//! | POST | `/spaces/{space}/delete` | delete the objects a YAML body names |
//! | DELETE | `/spaces/{space}/objects/{kind}/{name}[?namespace=NS]` | delete one object |
//! | GET | `/spaces/{space}/objects?kind=K[&name=N][&namespace=NS]` | objects with per-placement summaries |
//! | any | `/spaces/{space}/{api,apis,version,openapi}/...`, and `/{api,apis,version,openapi}/...` for the space `default` | the Kubernetes API (see [`crate::kube`]) |
//! | GET | `/clusters[?space=S]` | the inventory, with each cluster's link state and last-seen (and its taints in space `S`) |
//! | any | `/clusters/{name}/[proxy/]...` | that cluster's own Kubernetes API, through the tiers (see `tunnel`; needs `debug`) |
//! | GET | `/status` | the tier tree: every link's state, lag and last heartbeat |
//! | GET | `/upsynced[?cluster=C]` | objects born on clusters that placements upsync, by cluster |
//! | GET, POST | `/ui/...` | the web view and its login (`relay/src/api/ui/`) |
//! | POST | `/revocations/{name}` | revoke a node (admin only; body `{"reason": "..."}`): every tier refuses it |
//! | GET | `/revocations` | the revoked names |
//!
//! Every request needs `Authorization: Bearer <token>` with a token from the tokens
//! file, or the web view's session cookie that stands for one; or, when configured, a
//! client certificate from the users' CA or an OIDC ID token (see `authn`); nothing but
//! the web view's page itself (which holds no data) is served anonymously. What each
//! token may do is [`auth`]'s.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Limited, StreamBody};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use strata_protocol::model::Space;
use tokio_rustls::TlsAcceptor;

use crate::config::{ApiConfig, NodeConfig};
use crate::http;
use crate::tier::runtime::NodeClient;

mod audit;
pub mod auth;
mod authn;
mod objects;
pub mod paths;
mod revoke;
mod tree;
mod tunnel;
mod ui;

use crate::kube::selector::LabelQuery;
use paths::ObjectFilter;
use strata_node::tls::{self, Identity, TlsError};

/// A response body: one document, or a stream (a watch).
pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// Largest request body accepted.
pub const MAX_BODY: usize = 16 << 20;

/// What every request handler reads: the tokens the API accepts and the node it serves.
struct ApiState {
    /// The tokens file, read again whenever it changes.
    tokens: crate::reload::Reloading<auth::Tokens>,
    node: NodeClient,
    metrics: Arc<crate::api_metrics::ApiMetrics>,
    /// Status changes, for watches (see [`crate::kube::status_journal`]).
    journal: crate::kube::status_journal::SharedJournal,
    /// What `/livez`, `/healthz` and `/readyz` answer (the metrics listener's checks).
    health: Arc<dyn strata_node::ops::OpsSource>,
    /// The web view's login codes and sessions.
    ui: ui::Sessions,
    /// Users of client certificates and OIDC ID tokens.
    authn: authn::Authenticators,
}

/// Why the API could not be started.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // fields: the configured file or address, and the cause
pub enum ApiStartError {
    /// The tokens file could not be read.
    #[error("{path}: cannot read the API tokens")]
    Tokens {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A line of the tokens file does not parse.
    #[error("{path}: {reason}")]
    BadTokens { path: PathBuf, reason: String },
    /// The tokens file holds no token: the API would serve no one.
    #[error("{path}: holds no token; the API serves no one anonymously")]
    NoTokens { path: PathBuf },
    /// The node's certificate, key or CA is unusable for the API (or the users' CA of
    /// `api.client_certificates`).
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The OIDC issuer of `api.oidc` is unusable.
    #[error(transparent)]
    Oidc(#[from] crate::identity::oidc::OidcSetupError),
    /// The API's address could not be bound.
    #[error("cannot bind the API on {addr}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// Starts serving the API; the returned task ends when aborted.
pub fn spawn(
    api: &ApiConfig,
    config: &NodeConfig,
    node: NodeClient,
    metrics: Arc<crate::api_metrics::ApiMetrics>,
    health: Arc<dyn strata_node::ops::OpsSource>,
) -> Result<tokio::task::JoinHandle<()>, ApiStartError> {
    let text = std::fs::read_to_string(&api.tokens).map_err(|source| ApiStartError::Tokens {
        path: api.tokens.clone(),
        source,
    })?;
    let (tokens, _) = auth::Tokens::parse(&text).map_err(|e| match e {
        auth::TokensError::Empty => ApiStartError::NoTokens {
            path: api.tokens.clone(),
        },
        e => ApiStartError::BadTokens {
            path: api.tokens.clone(),
            reason: e.to_string(),
        },
    })?;
    let (cert, key) = match &api.tls {
        Some((cert, key)) => (cert, key),
        None => (&config.tls.cert, &config.tls.key),
    };
    let identity = Identity::load(cert, key, &config.tls.ca)?;
    let user_ca = api.client_certificates.as_ref().map(|c| c.ca.as_path());
    let acceptor = TlsAcceptor::from(tls::api_server_config_for_users(&identity, user_ca)?);
    let authn = authn::Authenticators {
        client_certificates: api.client_certificates.as_ref().map(|c| c.roles.clone()),
        oidc: api
            .oidc
            .clone()
            .map(crate::identity::oidc::Oidc::new)
            .transpose()?,
    };
    if let Some(o) = &authn.oidc {
        tracing::info!(issuer = %o.config().issuer_url, audience = %o.config().audience, "user API accepts OIDC ID tokens");
    }
    if let Some(c) = &api.client_certificates {
        tracing::info!(ca = %c.ca.display(), "user API accepts client certificates");
    }
    let listener = http::bind(api.listen).map_err(|source| ApiStartError::Bind {
        addr: api.listen,
        source,
    })?;
    tracing::info!(listen = %api.listen, "user API serving");
    // Users added to or taken from the file count from its next reading on.
    let tokens = crate::reload::Reloading::spawn(
        api.tokens.clone(),
        "api.tokens",
        tokens,
        auth::Tokens::parse,
        crate::reload::POLL_EVERY,
    );
    let state = Arc::new(ApiState {
        tokens,
        node,
        metrics,
        journal: crate::kube::status_journal::SharedJournal::default(),
        health,
        ui: ui::Sessions::default(),
        authn,
    });
    Ok(tokio::spawn(http::accept_loop(
        listener,
        move |tcp, peer| {
            let acceptor = acceptor.clone();
            let state = state.clone();
            async move {
                let tls = match acceptor.accept(tcp).await {
                    Ok(t) => t,
                    Err(e) => {
                        tracing::debug!(%peer, error = %e, "API TLS handshake failed");
                        return;
                    }
                };
                let conn = Arc::new(authn::Connection::new(
                    peer,
                    tls.get_ref().1.peer_certificates(),
                ));
                let service = hyper::service::service_fn(move |req| {
                    let state = state.clone();
                    let conn = conn.clone();
                    async move {
                        let verb = crate::api_metrics::verb(&req);
                        let started = tokio::time::Instant::now();
                        let gzip = accepts_gzip(&req);
                        let resp = compress(handle(req, &state, &conn).await, gzip).await;
                        let took = started.elapsed();
                        state.metrics.observe(verb, resp.status(), took).await;
                        Ok::<_, Infallible>(resp)
                    }
                });
                // HTTP/2 or HTTP/1.1, as ALPN chose; exec, attach and port-forward
                // through the debug tunnel upgrade an HTTP/1.1 connection (`tunnel`).
                if let Err(e) = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection_with_upgrades(TokioIo::new(tls), service)
                    .await
                {
                    tracing::debug!(%peer, error = %e, "API connection ended");
                }
            }
        },
    )))
}

/// Responses larger than this go gzipped to a client that accepts it, as
/// kube-apiserver's (128 KiB); smaller ones and streams (watches) go as they are.
const GZIP_ABOVE: u64 = 128 * 1024;

fn accepts_gzip<B>(req: &Request<B>) -> bool {
    req.headers()
        .get_all(hyper::header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|e| e.split(';').next().is_some_and(|e| e.trim() == "gzip"))
}

/// `resp`, gzipped when the client accepts it and its body is whole and large.
async fn compress(resp: Response<Body>, gzip: bool) -> Response<Body> {
    use hyper::body::Body as _;
    let large = resp
        .body()
        .size_hint()
        .exact()
        .is_some_and(|n| n > GZIP_ABOVE);
    if !gzip || !large || resp.headers().contains_key(hyper::header::CONTENT_ENCODING) {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let whole = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(never) => match never {},
    };
    let mut encoder = flate2::write::GzEncoder::new(
        Vec::with_capacity(whole.len() / 4),
        flate2::Compression::fast(),
    );
    let packed = std::io::Write::write_all(&mut encoder, &whole).and_then(|()| encoder.finish());
    let body = match packed {
        Ok(packed) => {
            parts.headers.insert(
                hyper::header::CONTENT_ENCODING,
                hyper::header::HeaderValue::from_static("gzip"),
            );
            parts.headers.remove(hyper::header::CONTENT_LENGTH);
            packed.into()
        }
        Err(_) => whole,
    };
    parts.headers.append(
        hyper::header::VARY,
        hyper::header::HeaderValue::from_static("Accept-Encoding"),
    );
    Response::from_parts(parts, http_body_util::Full::new(body).boxed_unsync())
}

/// `/livez`, `/readyz`, `/healthz` and `/version`: answered without a token, as
/// kube-apiserver answers them to anyone, for load balancers and probes.
async fn public(req: &Request<Incoming>, state: &ApiState) -> Option<Response<Body>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return None;
    }
    match req.uri().path() {
        path @ ("/livez" | "/readyz" | "/healthz") => {
            let format = strata_node::exposition::Format::from_accept(None);
            let resp = strata_node::ops::answer(path, format, &*state.health).await;
            Some(resp.map(BodyExt::boxed_unsync))
        }
        "/version" => Some(reply(StatusCode::OK, crate::kube::discovery::version())),
        _ => None,
    }
}

/// A JSON answer, ended by a newline as kube-apiserver's encoder ends it (clients that
/// print a failure's body, as the Python client does, show it byte for byte).
fn reply(status: StatusCode, body: Value) -> Response<Body> {
    http::response(status, "application/json", format!("{body}\n")).map(BodyExt::boxed_unsync)
}

fn error(status: StatusCode, message: impl Into<String>) -> Response<Body> {
    reply(status, json!({ "error": message.into() }))
}

/// What a standby root replica answers a write (503, a `metav1.Status`).
pub const STANDBY_REFUSAL: &str = "this root replica is a standby: it serves reads and children from \
     etcd; writes go to the replica holding the etcd writer lease (the one whose /readyz \
     answers 200); try again there";

/// How long a write waits for the store to make it durable before it is answered 503.
const DURABLE_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

/// The log's head right after a write ran in the node (a response extension): the
/// revision whose commit makes the write durable.
#[derive(Debug, Clone, Copy)]
struct WrittenAt(u64);

/// Answers a request; a write is answered only once the store holds it (the node
/// answers the API from memory, and commits right after: a replica killed in between
/// must not have acknowledged it).
async fn handle(
    req: Request<Incoming>,
    state: &ApiState,
    conn: &authn::Connection,
) -> Response<Body> {
    let write = req.method() != Method::GET && req.method() != Method::HEAD;
    let response = handle_request(req, state, conn).await;
    if !write || !response.status().is_success() {
        return response;
    }
    let mut committed = state.node.head_changes();
    let head = match response.extensions().get::<WrittenAt>() {
        Some(WrittenAt(head)) => *head,
        None => match state.node.query(|c| c.log().head().0).await {
            Some(head) => head,
            None => return error(StatusCode::SERVICE_UNAVAILABLE, "the node is stopping"),
        },
    };
    match tokio::time::timeout(DURABLE_WITHIN, committed.wait_for(|h| *h >= head)).await {
        Ok(Ok(_)) => response,
        _ => {
            let (_, status) = crate::kube::failure(
                503,
                "ServiceUnavailable",
                format!(
                    "the write is not known to be durable after {DURABLE_WITHIN:?} (the store \
                     does not take writes); it may or may not have been applied"
                ),
                None,
            );
            reply(StatusCode::SERVICE_UNAVAILABLE, status)
        }
    }
}

async fn handle_request(
    req: Request<Incoming>,
    state: &ApiState,
    conn: &authn::Connection,
) -> Response<Body> {
    if let Some(resp) = public(&req, state).await {
        return resp;
    }
    if let Some(resp) = ui::public(&req, state).await {
        return resp;
    }
    let tokens = state.tokens.current();
    let (grant, session) = match authn::authenticate(&req, state, &tokens, conn).await {
        Ok(a) => (a.grant, a.session),
        Err(refusal) => return *refusal,
    };
    let grant: &auth::Grant = &grant;
    if !ui::csrf_ok(session.is_some(), req.method(), req.headers()) {
        let (_, status) = crate::kube::failure(
            403,
            "Forbidden",
            format!(
                "a write with the web view's session cookie must carry the {} header",
                ui::CSRF_HEADER
            ),
            None,
        );
        return reply(StatusCode::FORBIDDEN, status);
    }
    if let Some((cluster, path)) = tunnel::target(req.uri().path()) {
        return tunnel::serve(req, grant, state, cluster, path).await;
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
            let (_, status) = crate::kube::failure(
                413,
                "RequestEntityTooLarge",
                format!(
                    "Request entity too large: limit is {MAX_BODY} bytes (or the body is unreadable)"
                ),
                None,
            );
            return reply(StatusCode::PAYLOAD_TOO_LARGE, status);
        }
    };
    let p: Vec<&str> = path.iter().map(String::as_str).collect();
    if let Some(resp) = ui::api(state, grant, session.as_deref(), &method, &p, &query).await {
        return resp;
    }
    // Asking what one may do is a read, whatever its method.
    let review = p.ends_with(&["selfsubjectaccessreviews"]);
    let write = method != Method::GET && method != Method::HEAD && !review;
    if let Err(why) = grant.allows(auth::space_of(&p), write) {
        tracing::info!(user = %grant.user, %method, path = %path.join("/"), %why, "refused");
        if write {
            audit::api_write(grant, &method, &p, &body, StatusCode::FORBIDDEN);
        }
        let (_, status) = crate::kube::failure(403, "Forbidden", why.to_string(), None);
        return reply(StatusCode::FORBIDDEN, status);
    }
    if write && state.node.query(|c| c.is_standby()).await == Some(true) {
        audit::api_write(grant, &method, &p, &body, StatusCode::SERVICE_UNAVAILABLE);
        let (_, status) =
            crate::kube::failure(503, "ServiceUnavailable", STANDBY_REFUSAL.into(), None);
        return reply(StatusCode::SERVICE_UNAVAILABLE, status);
    }
    let resp = route(state, &tokens, grant, &method, &p, &query, &headers, &body).await;
    if write {
        audit::api_write(grant, &method, &p, &body, resp.status());
    }
    resp
}

/// Serves an authorized request.
#[allow(clippy::too_many_arguments)] // the request's parts, as the handler took them apart
async fn route(
    state: &ApiState,
    tokens: &auth::Tokens,
    grant: &auth::Grant,
    method: &Method,
    p: &[&str],
    query: &[(String, String)],
    headers: &hyper::HeaderMap,
    body: &Bytes,
) -> Response<Body> {
    let kube = crate::kube::Request {
        grant,
        http: crate::kube::ApiRequest {
            method: method.as_str(),
            path: p,
            query,
            accept: header(headers, hyper::header::ACCEPT),
            content_type: header(headers, hyper::header::CONTENT_TYPE),
            body,
        },
        named_spaces: &tokens.named_spaces,
    };
    match crate::kube::handle(&state.node, &state.journal, kube).await {
        Some(crate::kube::Reply::Json((code, value))) => {
            return reply(
                StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                value,
            );
        }
        Some(crate::kube::Reply::Warned {
            answer: (code, value),
            warnings,
            written_at,
        }) => {
            let mut resp = reply(
                StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                value,
            );
            if let Some(head) = written_at {
                resp.extensions_mut().insert(WrittenAt(head));
            }
            for w in warnings {
                // RFC 7234's warn-code 299 with no agent, as kube-apiserver sends it:
                // `299 - "unknown field \"spec.foo\""` (the text quoted and escaped).
                let text = serde_json::Value::String(w).to_string();
                if let Ok(v) = hyper::header::HeaderValue::from_str(&format!("299 - {text}")) {
                    resp.headers_mut().append(hyper::header::WARNING, v);
                }
            }
            return resp;
        }
        Some(crate::kube::Reply::Raw {
            code,
            content_type,
            body,
        }) => {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut resp = http::response(status, "application/json", body);
            if let Ok(v) = hyper::header::HeaderValue::from_str(&content_type) {
                resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
            }
            return resp.map(BodyExt::boxed_unsync);
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
    match (method, p) {
        (&Method::POST, ["spaces", space, "apply"]) => objects::apply(state, space, body).await,
        (&Method::POST, ["spaces", space, "delete"]) => {
            objects::delete_manifests(state, space, body).await
        }
        (&Method::DELETE, ["spaces", space, "objects", kind, name]) => {
            let filter = ObjectFilter {
                resource: Some((*kind).to_owned()),
                name: Some((*name).to_owned()),
                namespace: param(query, "namespace").map(Some),
                ..ObjectFilter::default()
            };
            objects::delete_one(state, space, filter).await
        }
        (&Method::GET, ["spaces", space, "objects"]) => {
            let filter = ObjectFilter {
                group: param(query, "group").map(|g| crate::kube::decode(&g)),
                resource: param(query, "kind"),
                name: param(query, "name"),
                namespace: param(query, "namespace").map(Some),
                ..ObjectFilter::default()
            };
            let labels = match param(query, "labelSelector")
                .map(|s| LabelQuery::parse(&crate::kube::decode(&s)))
                .transpose()
            {
                Ok(l) => l.unwrap_or_default(),
                Err(e) => return error(StatusCode::BAD_REQUEST, format!("labelSelector: {e}")),
            };
            objects::get_objects(state, space, filter, labels, false).await
        }
        (&Method::POST, ["revocations", name]) => revoke::revoke(state, grant, name, body).await,
        (&Method::GET, ["revocations"]) => revoke::list(state).await,
        (&Method::GET, ["clusters"]) => {
            // Taints are the space's: shown only for a space the grant may read.
            let space = param(query, "space")
                .filter(|s| grant.allows(Some(s), false).is_ok())
                .and_then(|s| space_of(&s).ok());
            tree::clusters(state, space).await
        }
        (&Method::GET, ["status"]) => tree::status(state).await,
        (&Method::GET, ["upsynced"]) => tree::upsynced(state, param(query, "cluster")).await,
        _ => not_found(method, p),
    }
}

fn not_found(method: &Method, path: &[&str]) -> Response<Body> {
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

fn param(query: &[(String, String)], name: &str) -> Option<String> {
    query
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
}
