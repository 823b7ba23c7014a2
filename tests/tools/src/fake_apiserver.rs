//! `FakeApiServer`: a FAKE Kubernetes API server over real HTTP on 127.0.0.1, so the
//! agent's real client code (kube-rs) runs against it. It speaks what the tests need:
//! discovery (`/api`, `/apis`, resource lists), GET, LIST, WATCH (from a
//! resourceVersion), server-side apply PATCH (`application/apply-patch+yaml` with JSON
//! bodies, `fieldManager`, `force`, conflicts), merge PATCH, DELETE, with
//! resourceVersion and generation semantics, 403 for requests the test denies, and
//! CustomResourceDefinitions that become Established (at once, or when the test says)
//! and then add their kind to discovery; Pod logs (streamed with `follow`) and exec
//! over WebSocket (`pods.rs`). It is a fake: see `store.rs` for what it simplifies. No TLS (the kubeconfig points at `http://127.0.0.1:port`).

#![allow(dead_code, unreachable_pub, missing_docs, clippy::unwrap_used)]

pub mod kubelet;
pub mod pods;
pub mod routes;
pub mod store;
mod watches;

use watches::{ChannelBody, start_watch};

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::sync::{Mutex, watch};

use routes::verb_of;
use store::{ApplyError, ObjectStore, Selector, Slot};

/// A kind the fake serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub plural: String,
    pub namespaced: bool,
}

/// One request as the fake received it.
#[derive(Debug, Clone)]
pub struct Logged {
    pub method: String,
    pub path: String,
    pub query: String,
}

impl Logged {
    /// Whether this request changed (or tried to change) something.
    pub fn is_write(&self) -> bool {
        self.method != "GET"
    }
}

#[derive(Debug)]
pub struct State {
    resources: Vec<Resource>,
    objects: ObjectStore,
    log: Vec<Logged>,
    /// (verb, plural) pairs answered with 403; `("*", "*")` denies everything.
    denied: BTreeSet<(String, String)>,
    establish_crds: bool,
    /// Bytes a second a followed Pod log streams (`pods::log`).
    log_rate: u64,
    /// Every `Authorization` header received.
    authorizations: BTreeSet<String>,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    rv: watch::Sender<u64>,
}

/// The fake API server; stops when dropped, closing every connection.
#[derive(Debug)]
pub struct FakeApiServer {
    pub addr: SocketAddr,
    inner: Arc<Inner>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn builtin() -> Vec<Resource> {
    let r = |group: &str, kind: &str, plural: &str, namespaced: bool| Resource {
        group: group.into(),
        version: "v1".into(),
        kind: kind.into(),
        plural: plural.into(),
        namespaced,
    };
    vec![
        r("", "Namespace", "namespaces", false),
        r("", "ConfigMap", "configmaps", true),
        r("", "Secret", "secrets", true),
        r("", "Service", "services", true),
        r("", "Pod", "pods", true),
        r("", "Event", "events", true),
        r("", "PersistentVolumeClaim", "persistentvolumeclaims", true),
        r(
            "snapshot.storage.k8s.io",
            "VolumeSnapshot",
            "volumesnapshots",
            true,
        ),
        r("apps", "Deployment", "deployments", true),
        r("apps", "StatefulSet", "statefulsets", true),
        r("apps", "DaemonSet", "daemonsets", true),
        r("apps", "ReplicaSet", "replicasets", true),
        r("batch", "Job", "jobs", true),
        r(
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            false,
        ),
    ]
}

fn status(code: StatusCode, reason: &str, message: String) -> Response<BoxBody> {
    json_response(
        code,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": message, "reason": reason, "code": code.as_u16()}),
    )
}

type BoxBody = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;

fn json_response(code: StatusCode, v: &Value) -> Response<BoxBody> {
    let mut r = Response::new(Full::new(Bytes::from(v.to_string())).boxed());
    *r.status_mut() = code;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

fn query_param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

fn decode(s: &str) -> String {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl FakeApiServer {
    /// Starts the fake on 127.0.0.1 (an ephemeral port). CRDs become Established as
    /// soon as they are stored.
    pub async fn start() -> FakeApiServer {
        Self::start_on(0).await
    }

    /// Starts the fake on 127.0.0.1:`port`.
    pub async fn start_on(port: u16) -> FakeApiServer {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                resources: builtin(),
                objects: ObjectStore::default(),
                log: Vec::new(),
                denied: BTreeSet::new(),
                establish_crds: true,
                log_rate: 2_000,
                authorizations: BTreeSet::new(),
            }),
            rv: watch::channel(0).0,
        });
        let served = inner.clone();
        let task = tokio::spawn(async move {
            // The connections are the accept loop's: dropping the fake (which aborts
            // this task) closes them too, so a client with a kept-alive connection
            // sees the server go, as it would a real one.
            let mut connections = tokio::task::JoinSet::new();
            loop {
                while connections.try_join_next().is_some() {}
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let inner = served.clone();
                connections.spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let inner = inner.clone();
                        async move { Ok::<_, std::convert::Infallible>(handle(&inner, req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), service)
                        .with_upgrades()
                        .await;
                });
            }
        });
        FakeApiServer { addr, inner, task }
    }

    /// A kubeconfig file pointing at this server, written into `dir`.
    pub fn write_kubeconfig(&self, dir: &Path) -> PathBuf {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://{}\n\
             users:\n- name: agent\n  user:\n    token: fake-token\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: agent\n\
             current-context: fake\n",
            self.addr
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    /// CRDs stay un-Established until [`FakeApiServer::establish`] (when `false`).
    pub async fn set_establish_crds(&self, on: bool) {
        self.inner.state.lock().await.establish_crds = on;
    }

    /// Establishes a stored CRD (its kind joins discovery).
    pub async fn establish(&self, crd: &str) -> bool {
        let done = self.inner.state.lock().await.establish(crd);
        self.bump().await;
        done
    }

    /// Answers 403 to `verb` on `plural` (`"*"` for any).
    pub async fn deny(&self, verb: &str, plural: &str) {
        self.inner
            .state
            .lock()
            .await
            .denied
            .insert((verb.into(), plural.into()));
    }

    /// Sets how fast a followed Pod log streams, in bytes a second.
    pub async fn set_log_rate(&self, bytes_per_second: u64) {
        self.inner.state.lock().await.log_rate = bytes_per_second;
    }

    /// Every `Authorization` header the fake received.
    pub async fn authorizations(&self) -> BTreeSet<String> {
        self.inner.state.lock().await.authorizations.clone()
    }

    /// Every request received so far.
    pub async fn requests(&self) -> Vec<Logged> {
        self.inner.state.lock().await.log.clone()
    }

    /// An object as stored, if any.
    pub async fn get(
        &self,
        group: &str,
        plural: &str,
        ns: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let slot = slot(group, plural, ns, name);
        self.inner
            .state
            .lock()
            .await
            .objects
            .objects
            .get(&slot)
            .map(|s| s.object.clone())
    }

    /// Waits until an object exists (at most 10 s) and returns it.
    pub async fn wait_for(&self, group: &str, plural: &str, ns: Option<&str>, name: &str) -> Value {
        for _ in 0..500 {
            if let Some(o) = self.get(group, plural, ns, name).await {
                return o;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("{plural} {name} never appeared");
    }

    /// Creates or replaces an object as someone else would (a user, a controller).
    pub async fn insert(&self, group: &str, plural: &str, ns: Option<&str>, object: Value) {
        let name = object["metadata"]["name"].as_str().unwrap().to_owned();
        self.inner
            .state
            .lock()
            .await
            .objects
            .insert(&slot(group, plural, ns, &name), object);
        self.bump().await;
    }

    /// Merges a patch into an object as `manager` would (a user's edit, a controller's
    /// status update).
    pub async fn patch(
        &self,
        group: &str,
        plural: &str,
        ns: Option<&str>,
        name: &str,
        patch: Value,
        manager: &str,
    ) {
        self.inner
            .state
            .lock()
            .await
            .objects
            .merge_patch(&slot(group, plural, ns, name), &patch, manager)
            .unwrap();
        self.bump().await;
    }

    /// Deletes an object as someone else would.
    pub async fn remove(&self, group: &str, plural: &str, ns: Option<&str>, name: &str) -> bool {
        let gone = self
            .inner
            .state
            .lock()
            .await
            .objects
            .delete(&slot(group, plural, ns, name))
            .is_some();
        self.bump().await;
        gone
    }

    async fn bump(&self) {
        let rv = self.inner.state.lock().await.objects.rv;
        self.inner.rv.send_replace(rv);
    }
}

fn slot(group: &str, plural: &str, ns: Option<&str>, name: &str) -> Slot {
    Slot {
        group: group.into(),
        plural: plural.into(),
        namespace: ns.map(str::to_owned),
        name: name.into(),
    }
}

async fn handle(inner: &Arc<Inner>, req: Request<Incoming>) -> Response<BoxBody> {
    if let Some(a) = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        inner.state.lock().await.authorizations.insert(a.to_owned());
    }
    if req.uri().path().ends_with("/exec") && pods::is_websocket(&req) {
        let query = req.uri().query().unwrap_or_default().to_owned();
        return pods::exec(req, &query);
    }
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_owned();
    let query = parts.uri.query().unwrap_or_default().to_owned();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let mut state = inner.state.lock().await;
    // The fake's own counter, for a figures program in another process (not logged).
    if path == "/fake/requests" {
        let writes = state.log.iter().filter(|r| r.is_write()).count();
        return json_response(
            StatusCode::OK,
            &json!({"total": state.log.len(), "writes": writes}),
        );
    }
    state.log.push(Logged {
        method: parts.method.to_string(),
        path: path.clone(),
        query: query.clone(),
    });
    if parts.method == Method::GET
        && let Some(d) = state.discovery(&path)
    {
        {
            if state.denies("get", "*") {
                return status(
                    StatusCode::FORBIDDEN,
                    "Forbidden",
                    "forbidden: discovery".into(),
                );
            }
            return json_response(StatusCode::OK, &d);
        }
    }
    let target = match state.resolve(&path) {
        None => {
            return status(
                StatusCode::NOT_FOUND,
                "NotFound",
                format!("no route {path}"),
            );
        }
        Some(Err(e)) => return status(StatusCode::NOT_FOUND, "NotFound", e),
        Some(Ok(t)) => t,
    };
    if target.resource.plural == "pods"
        && target.subresource.as_deref() == Some("log")
        && let Some(name) = &target.name
    {
        let follow = query_param(&query, "follow") == Some("true");
        return pods::log(name, follow, state.log_rate);
    }
    let watching = matches!(query_param(&query, "watch"), Some("true" | "1"));
    let verb = verb_of(&parts.method, &target, watching);
    let r = target.resource.clone();
    if state.denies(verb, &r.plural) {
        return status(
            StatusCode::FORBIDDEN,
            "Forbidden",
            format!(
                "{} is forbidden: User \"system:serviceaccount:strata:agent\" cannot {verb} resource \"{}\" in API group \"{}\"{}",
                r.plural,
                r.plural,
                r.group,
                target
                    .namespace
                    .as_ref()
                    .map(|n| format!(" in the namespace \"{n}\""))
                    .unwrap_or_default()
            ),
        );
    }
    let Some(name) = target.name.clone() else {
        let selector = Selector::parse(&decode(query_param(&query, "labelSelector").unwrap_or("")));
        if watching {
            let from: u64 = query_param(&query, "resourceVersion")
                .and_then(|v| v.parse().ok())
                .unwrap_or(state.objects.rv);
            let timeout = query_param(&query, "timeoutSeconds")
                .and_then(|v| v.parse().ok())
                .unwrap_or(60u64);
            drop(state);
            return start_watch(inner.clone(), target, selector, from, timeout);
        }
        let items = state
            .objects
            .list(&r.group, &r.plural, target.namespace.as_deref(), &selector);
        let api_version = if r.group.is_empty() {
            r.version.clone()
        } else {
            format!("{}/{}", r.group, r.version)
        };
        return json_response(
            StatusCode::OK,
            &json!({"kind": format!("{}List", r.kind), "apiVersion": api_version,
                    "metadata": {"resourceVersion": state.objects.rv.to_string()}, "items": items}),
        );
    };
    let slot = Slot {
        group: r.group.clone(),
        plural: r.plural.clone(),
        namespace: target.namespace.clone(),
        name: name.clone(),
    };
    let not_found = || {
        status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("{}.{} \"{name}\" not found", r.plural, r.group),
        )
    };
    let response = match parts.method {
        Method::GET => match state.objects.objects.get(&slot) {
            Some(s) => json_response(StatusCode::OK, &s.object),
            None => not_found(),
        },
        Method::DELETE => match state.objects.delete(&slot) {
            Some(o) => json_response(StatusCode::OK, &o),
            None => not_found(),
        },
        Method::PATCH => {
            let content_type = parts
                .headers
                .get(hyper::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
                return status(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "UnsupportedMediaType",
                    "the fake API server only reads JSON bodies".into(),
                );
            };
            let manager = decode(query_param(&query, "fieldManager").unwrap_or(""));
            if content_type.starts_with("application/apply-patch") {
                if manager.is_empty() {
                    return status(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "Invalid",
                        "PATCH, fieldManager: Required value: is required for apply patch".into(),
                    );
                }
                if patch["metadata"]["name"].as_str() != Some(name.as_str()) {
                    return status(
                        StatusCode::BAD_REQUEST,
                        "BadRequest",
                        "the name of the object does not match the name on the URL".into(),
                    );
                }
                let force = query_param(&query, "force") == Some("true");
                match state.objects.apply(&slot, patch, &manager, force) {
                    Ok(o) => {
                        if r.kind == "CustomResourceDefinition" {
                            state.crd_stored(&name);
                        }
                        json_response(StatusCode::OK, &o)
                    }
                    Err(ApplyError::Conflict(m)) => status(StatusCode::CONFLICT, "Conflict", m),
                    Err(ApplyError::Invalid(m)) => {
                        status(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", m)
                    }
                }
            } else {
                match state.objects.merge_patch(&slot, &patch, &manager) {
                    Some(o) => json_response(StatusCode::OK, &o),
                    None => not_found(),
                }
            }
        }
        _ => status(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "not supported by the fake".into(),
        ),
    };
    let rv = state.objects.rv;
    drop(state);
    inner.rv.send_replace(rv);
    response
}
