//! The Kubernetes API of each space: `https://ROOT/spaces/{space}/...` (a kubeconfig's
//! `server:` with that path), and `https://ROOT/...` for the space `default`.
//!
//! Served: `/version`; discovery ([`discovery`]); the OpenAPI v3 index and documents;
//! for every type of the space's [`catalog::Catalog`]: get, list (`labelSelector`,
//! `fieldSelector` on `metadata.name`/`metadata.namespace`, `limit`/`continue`, tables
//! for `kubectl get`), create, update (409 on a stale `resourceVersion`), patch (JSON
//! merge, JSON patch, strategic merge), delete and deletecollection, `dryRun=All`, and
//! strict field validation for built-in types (`fieldValidation=Strict`, what kubectl
//! sends). Errors are `metav1.Status` objects. `resourceVersion` is the root's revision.
//!
//! Watches (`watch=true`) stream events from a `resourceVersion` on ([`watch`]).
//!
//! Server-side apply (`application/apply-patch+yaml`, field managers, conflicts) is
//! [`ssa`].
//!
//! Not served yet, each answered with a `Status` saying so: OpenAPI v2, aggregated discovery (clients fall
//! back to the discovery above).

pub mod catalog;
pub mod discovery;
pub mod kubeconfig;
pub mod patch;
pub mod protobuf;
pub mod render;
pub mod selector;
pub mod ssa;
pub mod watch;

use serde_json::{Value, json};
use strata_protocol::model::{Object, ObjectKey, Space};
use strata_protocol::wire::Change;

use crate::node::core::NodeCore;
use crate::node::runtime::NodeClient;
use catalog::{Catalog, ResourceType};
use selector::{FieldQuery, LabelQuery};
use strata_node::objects::manifest_from_value;

/// A request as the API's front door parsed it.
#[derive(Debug)]
pub struct Request<'a> {
    /// `GET`, `POST`, ...
    pub method: &'a str,
    /// The path's segments.
    pub path: &'a [&'a str],
    /// Query parameters, in order.
    pub query: &'a [(String, String)],
    /// The `Accept` header.
    pub accept: &'a str,
    /// The `Content-Type` header.
    pub content_type: &'a str,
    /// The body.
    pub body: &'a [u8],
}

/// An answer: HTTP status and a JSON body.
pub type Answer = (u16, Value);

/// What the front door sends back.
#[derive(Debug)]
pub enum Reply {
    /// One JSON document.
    Json(Answer),
    /// A stream of watch events.
    Watch(Box<watch::Watch>),
}

/// A watch's own parameters.
#[derive(Debug, Clone, Copy)]
struct WatchParams {
    from: Option<u64>,
    bookmarks: bool,
    timeout: Option<std::time::Duration>,
}

const ROOTS: [&str; 4] = ["version", "api", "apis", "openapi"];

/// The kinds with a `scale` subresource.
const SCALABLE: [&str; 4] = [
    "Deployment",
    "StatefulSet",
    "ReplicaSet",
    "ReplicationController",
];

/// Answers `req` if its path belongs to the Kubernetes API; `None` otherwise.
pub async fn handle(node: &NodeClient, req: Request<'_>) -> Option<Reply> {
    let (space, prefix, rest): (&str, String, &[&str]) = match req.path {
        ["spaces", space, rest @ ..] if rest.first().is_some_and(|r| ROOTS.contains(r)) => {
            (space, format!("/spaces/{space}"), rest)
        }
        [first, ..] if ROOTS.contains(first) => ("default", String::new(), req.path),
        _ => return None,
    };
    if let Err(why) = crate::config::check_node_name(space) {
        return Some(Reply::Json(failure(
            400,
            "BadRequest",
            format!("space: {why}"),
            None,
        )));
    }
    let op = match Op::parse(&req, rest, prefix) {
        Ok(op) => op,
        Err(answer) => return Some(Reply::Json(answer)),
    };
    let space = Space(space.to_owned());
    let watch = match &op {
        Op::Resource(r) => r.watch,
        _ => None,
    };
    let reply = match (op, watch) {
        (Op::Resource(r), Some(params)) => {
            let started = node
                .query(move |core: &mut NodeCore| r.start_watch(core, &space, params))
                .await
                .unwrap_or_else(|| Err(stopping()));
            match started {
                Ok((spec, first, since)) => Reply::Watch(Box::new(watch::Watch::new(
                    spec,
                    node.clone(),
                    first,
                    since,
                ))),
                Err(answer) => Reply::Json(answer),
            }
        }
        (op, _) => Reply::Json(
            node.query(move |core: &mut NodeCore| op.run(core, &space))
                .await
                .unwrap_or_else(stopping),
        ),
    };
    Some(reply)
}

fn stopping() -> Answer {
    failure(
        503,
        "ServiceUnavailable",
        "the node is stopping".into(),
        None,
    )
}

/// A `metav1.Status` failure.
pub fn failure(code: u16, reason: &str, message: String, details: Option<Value>) -> Answer {
    let mut v = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code,
    });
    if let Some(d) = details {
        v["details"] = d;
    }
    (code, v)
}

fn param<'a>(query: &'a [(String, String)], name: &str) -> Option<&'a str> {
    query
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Percent-decoding of a query value (selectors carry `=`, `,`, `!`, spaces).
fn decode(v: &str) -> String {
    let bytes = v.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'+', _) => out.push(b' '),
            (b'%', Some(b)) => {
                out.push(b);
                i += 2;
            }
            (b, _) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What a request asks, owned, to run inside the node's task.
#[derive(Debug)]
enum Op {
    Version,
    CoreVersions,
    Groups,
    Group(String),
    Resources(String, String),
    OpenApiIndex(String),
    OpenApiDocument(String, String),
    Resource(Box<ResourceOp>),
}

#[derive(Debug)]
struct ResourceOp {
    method: String,
    group: String,
    version: String,
    plural: String,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
    labels: LabelQuery,
    fields: FieldQuery,
    limit: Option<usize>,
    cont: Option<usize>,
    table: bool,
    dry_run: bool,
    strict: bool,
    content_type: String,
    body: Vec<u8>,
    watch: Option<WatchParams>,
    field_manager: Option<String>,
    force: bool,
}

impl Op {
    fn parse(req: &Request<'_>, rest: &[&str], prefix: String) -> Result<Op, Answer> {
        let get = req.method == "GET";
        let (group, version, tail): (&str, &str, &[&str]) = match rest {
            ["version"] if get => return Ok(Op::Version),
            ["api"] if get => return Ok(Op::CoreVersions),
            ["apis"] if get => return Ok(Op::Groups),
            ["apis", g] if get => return Ok(Op::Group((*g).to_owned())),
            ["api", v] if get => return Ok(Op::Resources(String::new(), (*v).to_owned())),
            ["apis", g, v] if get => return Ok(Op::Resources((*g).to_owned(), (*v).to_owned())),
            ["openapi", "v3"] if get => return Ok(Op::OpenApiIndex(prefix)),
            ["openapi", "v3", "api", v] if get => {
                return Ok(Op::OpenApiDocument(String::new(), (*v).to_owned()));
            }
            ["openapi", "v3", "apis", g, v] if get => {
                return Ok(Op::OpenApiDocument((*g).to_owned(), (*v).to_owned()));
            }
            ["openapi", ..] => {
                return Err(failure(
                    404,
                    "NotFound",
                    "this server serves OpenAPI v3 (/openapi/v3) only".into(),
                    None,
                ));
            }
            ["api", v, tail @ ..] => ("", *v, tail),
            ["apis", g, v, tail @ ..] => (*g, *v, tail),
            _ => {
                return Err(failure(
                    404,
                    "NotFound",
                    format!(
                        "the server could not find the requested resource: {}",
                        rest.join("/")
                    ),
                    None,
                ));
            }
        };
        let (namespace, plural, name, subresource) = match tail {
            ["namespaces", ns, plural, name, sub] => (Some(*ns), *plural, Some(*name), Some(*sub)),
            ["namespaces", ns, plural, name] => (Some(*ns), *plural, Some(*name), None),
            ["namespaces", ns, plural] => (Some(*ns), *plural, None, None),
            // The Namespace object itself.
            ["namespaces", name] => (None, "namespaces", Some(*name), None),
            [plural, name, sub] => (None, *plural, Some(*name), Some(*sub)),
            [plural, name] => (None, *plural, Some(*name), None),
            [plural] => (None, *plural, None, None),
            _ => {
                return Err(failure(
                    404,
                    "NotFound",
                    "no such resource path".into(),
                    None,
                ));
            }
        };
        let q = req.query;
        let labels = match param(q, "labelSelector") {
            Some(s) => LabelQuery::parse(&decode(s))
                .map_err(|e| failure(400, "BadRequest", format!("labelSelector: {e}"), None))?,
            None => LabelQuery::default(),
        };
        let fields = match param(q, "fieldSelector") {
            Some(s) => FieldQuery::parse(&decode(s))
                .map_err(|e| failure(400, "BadRequest", format!("fieldSelector: {e}"), None))?,
            None => FieldQuery::default(),
        };
        let number = |name: &str| -> Result<Option<usize>, Answer> {
            match param(q, name).filter(|v| !v.is_empty()) {
                None => Ok(None),
                Some(v) => v.parse().map(Some).map_err(|_| {
                    failure(
                        400,
                        "BadRequest",
                        format!("{name}: {v:?} is not a number"),
                        None,
                    )
                }),
            }
        };
        Ok(Op::Resource(Box::new(ResourceOp {
            method: req.method.to_owned(),
            group: group.to_owned(),
            version: version.to_owned(),
            plural: plural.to_owned(),
            namespace: namespace.map(str::to_owned),
            name: name.map(str::to_owned),
            subresource: subresource.map(str::to_owned),
            labels,
            fields,
            limit: number("limit")?.filter(|l| *l > 0),
            cont: number("continue")?,
            table: req.accept.contains("as=Table"),
            dry_run: param(q, "dryRun").is_some_and(|d| d == "All"),
            strict: param(q, "fieldValidation").is_some_and(|v| v == "Strict"),
            content_type: req.content_type.to_owned(),
            body: req.body.to_vec(),
            field_manager: param(q, "fieldManager").map(decode),
            force: param(q, "force") == Some("true"),
            watch: if get
                && name.is_none()
                && param(q, "watch").is_some_and(|w| w == "true" || w == "1")
            {
                Some(WatchParams {
                    from: number("resourceVersion")?.map(|v| v as u64),
                    bookmarks: param(q, "allowWatchBookmarks") == Some("true"),
                    timeout: number("timeoutSeconds")?
                        .map(|s| std::time::Duration::from_secs(s as u64)),
                })
            } else {
                None
            },
        })))
    }

    fn run(self, core: &mut NodeCore, space: &Space) -> Answer {
        let not_found = |what: String| failure(404, "NotFound", what, None);
        match self {
            Op::Version => (200, discovery::version()),
            Op::CoreVersions => (200, discovery::core_versions()),
            Op::Groups => (
                200,
                discovery::groups(&Catalog::of_space(core.log(), space)),
            ),
            Op::Group(g) => discovery::group(&Catalog::of_space(core.log(), space), &g)
                .map(|v| (200, v))
                .unwrap_or_else(|| not_found(format!("no API group {g:?}"))),
            Op::Resources(g, v) => {
                discovery::resources(&Catalog::of_space(core.log(), space), &g, &v)
                    .map(|doc| (200, doc))
                    .unwrap_or_else(|| not_found(format!("no API group version {g}/{v}")))
            }
            Op::OpenApiIndex(prefix) => {
                let catalog = Catalog::of_space(core.log(), space);
                (
                    200,
                    discovery::openapi_index(&catalog, &prefix, core.log().head().0),
                )
            }
            Op::OpenApiDocument(g, v) => {
                discovery::openapi_document(&Catalog::of_space(core.log(), space), &g, &v)
                    .map(|doc| (200, doc))
                    .unwrap_or_else(|| not_found(format!("no OpenAPI document for {g}/{v}")))
            }
            Op::Resource(r) => r.run(core, space),
        }
    }
}

impl ResourceOp {
    /// The type the path names.
    fn resource_type(&self, core: &NodeCore, space: &Space) -> Result<ResourceType, Answer> {
        let catalog = Catalog::of_space(core.log(), space);
        let Some(t) = catalog
            .by_resource(&self.group, &self.version, &self.plural)
            .cloned()
        else {
            return Err(failure(
                404,
                "NotFound",
                format!(
                    "the server could not find the requested resource ({} {}/{})",
                    self.plural, self.group, self.version
                ),
                None,
            ));
        };
        if !t.namespaced && self.namespace.is_some() {
            return Err(failure(
                404,
                "NotFound",
                format!("{} are not namespaced", t.plural),
                None,
            ));
        }
        Ok(t)
    }

    fn start_watch(
        self,
        core: &mut NodeCore,
        space: &Space,
        params: WatchParams,
    ) -> Result<(watch::WatchSpec, Vec<Value>, u64), Answer> {
        let spec = watch::WatchSpec {
            space: space.clone(),
            resource: self.resource_type(core, space)?,
            namespace: self.namespace,
            labels: self.labels,
            fields: self.fields,
            table: self.table,
            bookmarks: params.bookmarks,
            timeout: params.timeout,
        };
        let (first, since) = spec.start(core, params.from)?;
        Ok((spec, first, since))
    }

    fn run(self, core: &mut NodeCore, space: &Space) -> Answer {
        let t = match self.resource_type(core, space) {
            Ok(t) => t,
            Err(a) => return a,
        };
        match (
            self.method.as_str(),
            &self.name,
            self.subresource.as_deref(),
        ) {
            (_, Some(name), Some("scale")) if SCALABLE.contains(&t.kind.as_str()) => {
                self.scale(core, &t, space, name)
            }
            (_, _, Some(sub)) if sub != "status" => failure(
                404,
                "NotFound",
                format!("subresource {sub:?} is not served"),
                None,
            ),
            ("GET", Some(name), _) => self.get(core, &t, space, name),
            ("GET", None, None) => self.list(core, &t, space),
            ("POST", None, None) => self.create(core, &t, space),
            ("PUT", Some(name), None) => self.update(core, &t, space, name),
            ("PATCH", Some(name), None) => self.patch(core, &t, space, name),
            ("DELETE", Some(name), None) => self.delete(core, &t, space, name),
            ("DELETE", None, None) => self.delete_collection(core, &t, space),
            (m, _, _) => failure(
                405,
                "MethodNotAllowed",
                format!("{m} is not allowed here"),
                None,
            ),
        }
    }

    fn key(&self, t: &ResourceType, space: &Space, name: &str) -> ObjectKey {
        ObjectKey {
            space: space.clone(),
            group: t.group.clone(),
            version: t.version.clone(),
            kind: t.kind.clone(),
            namespace: if t.namespaced {
                self.namespace.clone()
            } else {
                None
            },
            name: name.to_owned(),
        }
    }

    /// The stored object `key` names, whatever version it was written in.
    fn find<'a>(core: &'a NodeCore, key: &ObjectKey) -> Option<&'a Object> {
        core.log().get(key).or_else(|| {
            core.log().live().find(|o| {
                let k = o.key();
                k.space == key.space
                    && k.group == key.group
                    && k.kind == key.kind
                    && k.namespace == key.namespace
                    && k.name == key.name
            })
        })
    }

    fn details(t: &ResourceType, name: &str) -> Value {
        json!({ "name": name, "group": t.group, "kind": t.plural })
    }

    fn missing(t: &ResourceType, name: &str) -> Answer {
        failure(
            404,
            "NotFound",
            format!("{}.{} {name:?} not found", t.plural, t.group).replace(". ", " "),
            Some(Self::details(t, name)),
        )
    }

    fn get(&self, core: &NodeCore, t: &ResourceType, space: &Space, name: &str) -> Answer {
        let key = self.key(t, space, name);
        match Self::find(core, &key) {
            Some(o) if self.table => (200, render::table(core, &[o], core.log().head().0)),
            Some(o) => (200, render::object(core, o)),
            None => Self::missing(t, name),
        }
    }

    fn matching<'a>(&self, core: &'a NodeCore, t: &ResourceType, space: &Space) -> Vec<&'a Object> {
        core.log()
            .live()
            .filter(|o| {
                let k = o.key();
                k.space == *space
                    && k.group == t.group
                    && k.kind == t.kind
                    && (self.namespace.is_none() || k.namespace == self.namespace)
                    && self.labels.matches(&o.meta.labels)
                    && self.fields.matches(k)
            })
            .collect()
    }

    fn list(&self, core: &NodeCore, t: &ResourceType, space: &Space) -> Answer {
        let all = self.matching(core, t, space);
        let start = self.cont.unwrap_or(0).min(all.len());
        let end = self.limit.map_or(all.len(), |l| (start + l).min(all.len()));
        let page = &all[start..end];
        let next = (end < all.len()).then(|| end.to_string());
        let head = core.log().head().0;
        if self.table {
            let mut table = render::table(core, page, head);
            if let Some(c) = next {
                table["metadata"]["continue"] = json!(c);
            }
            return (200, table);
        }
        let items = page.iter().map(|o| render::object(core, o)).collect();
        (
            200,
            render::list(&t.api_version(), &t.kind, head, items, next),
        )
    }

    /// The request body as JSON (kubectl sends JSON; YAML is accepted too).
    fn body(&self) -> Result<Value, Answer> {
        if self.content_type.contains("protobuf")
            && (self.plural == "secrets" || self.plural == "configmaps")
            && self.group.is_empty()
        {
            let kind = if self.plural == "secrets" {
                "Secret"
            } else {
                "ConfigMap"
            };
            return protobuf::decode(&self.body, kind)
                .map_err(|e| failure(400, "BadRequest", e.to_string(), None));
        }
        if self.content_type.contains("protobuf") || self.content_type.contains("cbor") {
            return Err(failure(
                415,
                "UnsupportedMediaType",
                format!(
                    "the body is {}; this server reads JSON and YAML (configure the client for application/json)",
                    self.content_type
                ),
                None,
            ));
        }
        let bad = |e: String| {
            failure(
                400,
                "BadRequest",
                format!("the body ({}) does not parse: {e}", self.content_type),
                None,
            )
        };
        if self.content_type.contains("yaml") {
            let text = std::str::from_utf8(&self.body).map_err(|e| bad(e.to_string()))?;
            serde_saphyr::from_str(text).map_err(|e| bad(e.to_string()))
        } else {
            serde_json::from_slice(&self.body).map_err(|e| bad(e.to_string()))
        }
    }

    /// Checks `value` is a `t` named `name` in the request's namespace, validates its
    /// fields when asked to, and stores it (unless a dry run); answers with the object.
    fn store(
        &self,
        core: &mut NodeCore,
        t: &ResourceType,
        space: &Space,
        mut value: Value,
        created: bool,
    ) -> Answer {
        // Who owns which fields (server-side apply) is the root's to record: kept from
        // the stored object, or set by the apply that computed `value`.
        let managed = value["metadata"]["managedFields"].take();
        let invalid = |field: &str, why: String| {
            failure(
                422,
                "Invalid",
                format!("{} is invalid: {field}: {why}", t.kind),
                Some(
                    json!({ "kind": t.plural, "group": t.group, "causes": [ { "reason": "FieldValueInvalid", "message": why, "field": field } ] }),
                ),
            )
        };
        let api_version = value["apiVersion"].as_str().unwrap_or_default().to_owned();
        let kind = value["kind"].as_str().unwrap_or_default().to_owned();
        if kind != t.kind || api_version != t.api_version() {
            return failure(
                400,
                "BadRequest",
                format!(
                    "the API version in the data ({api_version}) and kind ({kind}) do not match the request's ({}, {})",
                    t.api_version(),
                    t.kind
                ),
                None,
            );
        }
        if !value["metadata"].is_object() {
            return invalid("metadata", "is required".into());
        }
        if value["metadata"]["namespace"] == json!("")
            && let Some(m) = value["metadata"].as_object_mut()
        {
            m.remove("namespace");
        }
        match (&self.namespace, value["metadata"]["namespace"].as_str()) {
            (Some(path), Some(body)) if path != body => {
                return failure(
                    400,
                    "BadRequest",
                    format!(
                        "the namespace of the provided object ({body}) does not match the namespace sent on the request ({path})"
                    ),
                    None,
                );
            }
            (Some(path), _) if t.namespaced => value["metadata"]["namespace"] = json!(path),
            (None, Some(_)) if !t.namespaced => {
                if let Some(m) = value["metadata"].as_object_mut() {
                    m.remove("namespace");
                }
            }
            _ => {}
        }
        if t.namespaced && value["metadata"]["namespace"].is_null() {
            value["metadata"]["namespace"] = json!("default");
        }
        if self.strict
            && let Some(check) = t.check
        {
            let mut probe = value.clone();
            render::strip_assigned(&mut probe);
            match check(&probe) {
                Ok(unknown) if !unknown.is_empty() => {
                    let causes: Vec<Value> = unknown
                        .iter()
                        .map(|f| json!({ "reason": "FieldValueInvalid", "message": format!("unknown field {f:?}"), "field": f }))
                        .collect();
                    let list: Vec<String> = unknown
                        .iter()
                        .map(|f| format!("unknown field {f:?}"))
                        .collect();
                    return failure(
                        400,
                        "BadRequest",
                        format!("strict decoding error: {}", list.join(", ")),
                        Some(json!({ "causes": causes })),
                    );
                }
                Ok(_) => {}
                Err(e) => return invalid("", e),
            }
        }
        render::strip_assigned(&mut value);
        if managed.is_array() {
            value["metadata"]["managedFields"] = managed;
        }
        let manifest = match manifest_from_value(value, space) {
            Ok(m) => m,
            Err(errors) => {
                let first = &errors[0];
                return invalid(&first.field, first.reason.clone());
            }
        };
        let key = manifest.meta.key.clone();
        if !self.dry_run
            && let Err(e) = core.apply_manifests(std::slice::from_ref(&manifest))
        {
            return failure(500, "InternalError", e.to_string(), None);
        }
        let code = if created { 201 } else { 200 };
        match core.log().get(&key) {
            Some(o) if !self.dry_run => (code, render::object(core, o)),
            _ => (code, manifest.value),
        }
    }

    fn create(&self, core: &mut NodeCore, t: &ResourceType, space: &Space) -> Answer {
        let value = match self.body() {
            Ok(v) => v,
            Err(a) => return a,
        };
        let Some(name) = value["metadata"]["name"].as_str().map(str::to_owned) else {
            return failure(
                422,
                "Invalid",
                format!(
                    "{} is invalid: metadata.name: Required value (generateName is not supported)",
                    t.kind
                ),
                None,
            );
        };
        let mut key = self.key(t, space, &name);
        if t.namespaced && key.namespace.is_none() {
            key.namespace = Some(
                value["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("default")
                    .to_owned(),
            );
        }
        if Self::find(core, &key).is_some() {
            return failure(
                409,
                "AlreadyExists",
                format!("{} {name:?} already exists", t.plural),
                Some(Self::details(t, &name)),
            );
        }
        self.store(core, t, space, value, true)
    }

    fn update(&self, core: &mut NodeCore, t: &ResourceType, space: &Space, name: &str) -> Answer {
        let value = match self.body() {
            Ok(v) => v,
            Err(a) => return a,
        };
        if value["metadata"]["name"].as_str() != Some(name) {
            return failure(
                400,
                "BadRequest",
                "the name of the object does not match the name on the URL".into(),
                None,
            );
        }
        let key = self.key(t, space, name);
        let Some(current) = Self::find(core, &key) else {
            return Self::missing(t, name);
        };
        if let Some(rv) = value["metadata"]["resourceVersion"].as_str()
            && rv != current.revision.0.to_string()
        {
            return Self::conflict(t, name);
        }
        let mut value = value;
        if value["metadata"]["managedFields"].is_null()
            && let Ok(stored) = serde_json::from_slice::<Value>(&current.body)
        {
            value["metadata"]["managedFields"] = stored["metadata"]["managedFields"].clone();
        }
        self.store(core, t, space, value, false)
    }

    /// The `scale` subresource (`kubectl scale`): `spec.replicas` as an
    /// `autoscaling/v1` Scale, read, replaced or patched.
    fn scale(&self, core: &mut NodeCore, t: &ResourceType, space: &Space, name: &str) -> Answer {
        let key = self.key(t, space, name);
        let Some(current) = Self::find(core, &key) else {
            return Self::missing(t, name);
        };
        let object = render::object(core, current);
        let mut scale = json!({
            "kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {
                "name": name, "namespace": object["metadata"]["namespace"],
                "resourceVersion": object["metadata"]["resourceVersion"],
            },
            "spec": { "replicas": object["spec"]["replicas"].as_i64().unwrap_or(1) },
            "status": { "replicas": object["status"]["replicas"].as_i64().unwrap_or(0) },
        });
        let result = match self.method.as_str() {
            "GET" => return (200, scale),
            "PUT" => self.body().map(|b| scale = b),
            "PATCH" => {
                let patch: Value = match serde_json::from_slice(&self.body) {
                    Ok(p) => p,
                    Err(e) => {
                        return failure(
                            400,
                            "BadRequest",
                            format!("the patch does not parse: {e}"),
                            None,
                        );
                    }
                };
                if self.content_type.contains("json-patch") {
                    patch::json_patch(&mut scale, &patch)
                        .map_err(|e| failure(422, "Invalid", e.to_string(), None))
                } else {
                    patch::merge_patch(&mut scale, &patch);
                    Ok(())
                }
            }
            m => {
                return failure(
                    405,
                    "MethodNotAllowed",
                    format!("{m} is not allowed on scale"),
                    None,
                );
            }
        };
        if let Err(a) = result {
            return a;
        }
        let Some(replicas) = scale["spec"]["replicas"].as_i64().filter(|r| *r >= 0) else {
            return failure(
                422,
                "Invalid",
                "spec.replicas: must be a number, at least 0".into(),
                None,
            );
        };
        let mut updated = object;
        updated["spec"]["replicas"] = json!(replicas);
        match self.store(core, t, space, updated, false) {
            (200, stored) => {
                scale["spec"]["replicas"] = json!(replicas);
                scale["metadata"]["resourceVersion"] =
                    stored["metadata"]["resourceVersion"].clone();
                (200, scale)
            }
            other => other,
        }
    }

    fn conflict(t: &ResourceType, name: &str) -> Answer {
        failure(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} {name:?}: the object has been modified; please apply your changes to the latest version and try again",
                t.plural
            ),
            Some(Self::details(t, name)),
        )
    }

    fn patch(&self, core: &mut NodeCore, t: &ResourceType, space: &Space, name: &str) -> Answer {
        if self.content_type.contains("apply-patch") {
            return self.server_side_apply(core, t, space, name);
        }
        let key = self.key(t, space, name);
        let Some(current) = Self::find(core, &key) else {
            return Self::missing(t, name);
        };
        let revision = current.revision.0.to_string();
        let mut value = render::object(core, current);
        let patch: Value = match serde_json::from_slice(&self.body) {
            Ok(p) => p,
            Err(e) => {
                return failure(
                    400,
                    "BadRequest",
                    format!("the patch does not parse: {e}"),
                    None,
                );
            }
        };
        let result = if self.content_type.contains("json-patch") {
            patch::json_patch(&mut value, &patch)
        } else if self.content_type.contains("strategic-merge-patch") {
            if t.check.is_none() {
                return failure(
                    415,
                    "UnsupportedMediaType",
                    format!(
                        "strategic merge patch is not supported for {}; use a JSON merge patch",
                        t.kind
                    ),
                    None,
                );
            }
            patch::strategic_merge_patch(&mut value, &patch)
        } else if self.content_type.contains("merge-patch") {
            patch::merge_patch(&mut value, &patch);
            Ok(())
        } else {
            return failure(
                415,
                "UnsupportedMediaType",
                format!("unsupported patch type {:?}", self.content_type),
                None,
            );
        };
        if let Err(e) = result {
            return failure(
                422,
                "Invalid",
                format!("the patch does not apply: {e}"),
                None,
            );
        }
        if value["metadata"]["resourceVersion"]
            .as_str()
            .is_some_and(|rv| rv != revision)
        {
            return Self::conflict(t, name);
        }
        if value["metadata"]["name"].as_str() != Some(name) {
            return failure(
                400,
                "BadRequest",
                "a patch may not change metadata.name".into(),
                None,
            );
        }
        self.store(core, t, space, value, false)
    }

    fn server_side_apply(
        &self,
        core: &mut NodeCore,
        t: &ResourceType,
        space: &Space,
        name: &str,
    ) -> Answer {
        let Some(manager) = self.field_manager.clone().filter(|m| !m.is_empty()) else {
            return failure(
                422,
                "Invalid",
                "fieldManager: Required value: is required for apply requests".into(),
                None,
            );
        };
        let config = match self.body() {
            Ok(v) => v,
            Err(a) => return a,
        };
        if config["metadata"]["name"].as_str() != Some(name) {
            return failure(
                400,
                "BadRequest",
                "the name of the object does not match the name on the URL".into(),
                None,
            );
        }
        let key = self.key(t, space, name);
        let current: Option<Value> =
            Self::find(core, &key).and_then(|o| serde_json::from_slice(&o.body).ok());
        match ssa::apply(current.as_ref(), &config, &manager, self.force) {
            Ok(object) => self.store(core, t, space, object, current.is_none()),
            Err(ssa::Conflicts(conflicts)) => {
                let causes: Vec<Value> = conflicts
                    .iter()
                    .map(|(m, f)| json!({ "reason": "FieldManagerConflict", "message": format!("conflict with {m:?}"), "field": f }))
                    .collect();
                let list: Vec<String> = conflicts
                    .iter()
                    .map(|(m, f)| format!("conflict with {m:?}: {f}"))
                    .collect();
                failure(
                    409,
                    "Conflict",
                    format!(
                        "Apply failed with {} conflict{}: {}",
                        conflicts.len(),
                        if conflicts.len() == 1 { "" } else { "s" },
                        list.join("; ")
                    ),
                    Some(
                        json!({ "name": name, "group": t.group, "kind": t.plural, "causes": causes }),
                    ),
                )
            }
        }
    }

    fn remove(&self, core: &mut NodeCore, keys: Vec<ObjectKey>) -> Result<(), Answer> {
        if self.dry_run || keys.is_empty() {
            return Ok(());
        }
        core.apply(keys.into_iter().map(Change::Delete).collect())
            .map(|_| ())
            .map_err(|e| failure(500, "InternalError", e.to_string(), None))
    }

    fn delete(&self, core: &mut NodeCore, t: &ResourceType, space: &Space, name: &str) -> Answer {
        let key = self.key(t, space, name);
        let Some(found) = Self::find(core, &key).map(|o| o.key().clone()) else {
            return Self::missing(t, name);
        };
        if let Err(a) = self.remove(core, vec![found]) {
            return a;
        }
        (
            200,
            json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": Self::details(t, name),
            }),
        )
    }

    fn delete_collection(&self, core: &mut NodeCore, t: &ResourceType, space: &Space) -> Answer {
        let keys: Vec<ObjectKey> = self
            .matching(core, t, space)
            .into_iter()
            .map(|o| o.key().clone())
            .collect();
        let head = core.log().head().0;
        if let Err(a) = self.remove(core, keys) {
            return a;
        }
        (
            200,
            render::list(&t.api_version(), &t.kind, head, Vec::new(), None),
        )
    }
}
