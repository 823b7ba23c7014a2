//! The Kubernetes API of each space: `https://ROOT/spaces/{space}/...` (a kubeconfig's
//! `server:` with that path), and `https://ROOT/...` for the space `default`.
//!
//! Served: `/version`; discovery ([`discovery`]), also aggregated ([`aggregated`]); the
//! OpenAPI v3 index and documents and OpenAPI v2, with the schemas of every kind
//! ([`openapi`], [`openapi_v2`]);
//! for every type of the space's [`catalog::Catalog`]: get, list (`labelSelector`,
//! `fieldSelector` on `metadata.name`/`metadata.namespace`, `limit`/`continue`, tables
//! for `kubectl get`), create, update (409 on a stale `resourceVersion`), patch (JSON
//! merge, JSON patch, strategic merge), delete and deletecollection, `dryRun=All`, and
//! field validation for built-in types (`fieldValidation=Strict`, what kubectl sends,
//! refuses unknown fields; `Warn`, the default, names them in `Warning` headers), and
//! custom resources checked against their CRD's schema ([`schema_check`]; the same
//! check serves `relay apply`, [`batch_check`]). Errors are `metav1.Status` objects.
//! `resourceVersion` is the root's revision. Reads of a space that does not exist
//! answer 404 ([`spaces`]).
//!
//! Watches (`watch=true`) stream events from a `resourceVersion` on ([`watch`]),
//! status changes included ([`status_journal`]).
//!
//! Server-side apply (`application/apply-patch+yaml`, field managers, conflicts) is
//! [`ssa`].
//!
//! # Layout
//!
//! This is the async door, as kube-rs's client is to `kube-core`: what needs no node
//! core or runtime (the typed [`Status`], list and watch parameters, parsing a request
//! into an operation, the catalog, discovery, OpenAPI, SSA, schema checks, protobuf,
//! kubeconfigs) is the crate `strata-kube-core`, re-exported here under its old paths.
//!
//! - `mod.rs`: [`handle`], the door: a [`Request`] in, a [`Reply`] out, each operation
//!   run inside the node's task.
//! - `reads/`: get, list and the start of a watch; [`render`], [`clusters`] (the
//!   `Cluster` inventory), [`status_journal`], [`watch`], [`spaces`].
//! - [`writes`]: create, update, patch, server-side apply, scale, delete;
//!   [`writes::admit`], the one write path `POST /spaces/S/apply` shares;
//!   [`namespaces`], [`batch_check`].
//! - `schemas/`: the discovery and OpenAPI documents, built outside the node's task.

mod reads;
mod schemas;
pub mod writes;

// Where they were before the door was grouped.
pub use reads::{clusters, event_cache, render, spaces, status_journal, watch};
pub use writes::{batch_check, namespaces};

// The pure parts, from the crate without a runtime, where they were before it.
pub use strata_kube_core::{
    Answer, ApiRequest, Status, aggregated, catalog, decode, discovery, failure, kubeconfig,
    openapi, openapi_v2, patch, protobuf, schema_check, selector, ssa,
};

use serde_json::{Value, json};
use strata_kube_core::{Operation, ResourceRequest, SCALABLE};
use strata_protocol::model::{Object, ObjectKey, ObjectKeyParts, Space};

use crate::tier::core::NodeCore;
use crate::tier::runtime::NodeClient;
use catalog::{Catalog, ResourceType};
use status_journal::SharedJournal;

/// A request as the API's front door parsed it.
#[derive(Debug)]
pub struct Request<'a> {
    /// Who asks, and what they may do.
    pub grant: &'a crate::api::auth::Grant,
    /// Method, path (all its segments), query, `Accept`, `Content-Type` and body.
    pub http: ApiRequest<'a>,
    /// The spaces the tokens name (they exist even while empty: [`spaces`]).
    pub named_spaces: &'a std::collections::BTreeSet<String>,
}

impl<'a> std::ops::Deref for Request<'a> {
    type Target = ApiRequest<'a>;

    fn deref(&self) -> &ApiRequest<'a> {
        &self.http
    }
}

/// What the front door sends back.
#[derive(Debug)]
pub enum Reply {
    /// One JSON document.
    Json(Answer),
    /// One JSON document, with warnings for the client (`Warning` headers, which
    /// kubectl prints), as kube-apiserver sends under `fieldValidation=Warn`, and the
    /// revision a write left the log at.
    Warned {
        /// The document.
        answer: Answer,
        /// Each warning's text.
        warnings: Vec<String>,
        /// For a write, the log's head once it ran (in memory): the write is durable
        /// once the store committed this revision. `None` for a read.
        written_at: Option<u64>,
    },
    /// A stream of watch events.
    Watch(Box<watch::Watch>),
    /// A document in its own media type (aggregated discovery, OpenAPI v2 protobuf).
    Raw {
        /// HTTP status.
        code: u16,
        /// Its `Content-Type`.
        content_type: String,
        /// The encoded document.
        body: Vec<u8>,
    },
}

const ROOTS: [&str; 4] = ["version", "api", "apis", "openapi"];

/// The largest request body the Kubernetes API takes, as kube-apiserver's default
/// (`--max-request-bytes`, 3 MiB): a larger one is refused with 413.
pub const MAX_REQUEST_BODY: usize = 3 * 1024 * 1024;

/// Answers `req` if its path belongs to the Kubernetes API; `None` otherwise.
/// `journal` is the status journal that the API's reads and watches share.
pub async fn handle(node: &NodeClient, journal: &SharedJournal, req: Request<'_>) -> Option<Reply> {
    let (space, prefix, rest): (&str, String, &[&str]) = match req.path {
        ["spaces", space, rest @ ..] if rest.first().is_some_and(|r| ROOTS.contains(r)) => {
            (space, format!("/spaces/{space}"), rest)
        }
        [first, ..] if ROOTS.contains(first) => ("default", String::new(), req.path),
        _ => return None,
    };
    if req.body.len() > MAX_REQUEST_BODY {
        return Some(Reply::Json(failure(
            413,
            "RequestEntityTooLarge",
            format!(
                "Request entity too large: limit is {MAX_REQUEST_BODY} bytes, the body has {}",
                req.body.len()
            ),
            None,
        )));
    }
    if let Err(why) = crate::config::check_node_name(space) {
        return Some(Reply::Json(failure(
            400,
            "BadRequest",
            format!("space: {why}"),
            None,
        )));
    }
    if req.method == "POST"
        && rest
            == [
                "apis",
                "authorization.k8s.io",
                "v1",
                "selfsubjectaccessreviews",
            ]
    {
        return Some(Reply::Json(access_review(&req, space)));
    }
    if let Some(reply) = schemas::answer(node, &req, rest, space, &prefix).await {
        return Some(reply);
    }
    let parsed = Operation::parse(&ApiRequest {
        path: rest,
        ..req.http
    });
    let op = match parsed {
        Ok(Operation::Resource(r)) => Op::Resource(Box::new(ResourceOp::new(*r))),
        Ok(op) => Op::Other(op),
        Err(status) => return Some(Reply::Json(status.into())),
    };
    let space = Space(space.to_owned());
    let watch = match &op {
        Op::Resource(r) => r.watch,
        _ => None,
    };
    let named = req.named_spaces.clone();
    let reply = match (op, watch) {
        (Op::Resource(r), Some(params)) => {
            // Taken before the watch starts: a commit in between wakes it at once.
            let head = node.head_changes();
            let j = journal.clone();
            let started = node
                .query(move |core: &mut NodeCore| {
                    if !spaces::exists(core, &space, &named) {
                        return Err(spaces::missing(&space));
                    }
                    j.with(|j| r.start_watch(core, j, &space, params))
                        .unwrap_or_else(|| {
                            Err(failure(
                                503,
                                "ServiceUnavailable",
                                "the status journal is busy: watch again".into(),
                                None,
                            ))
                        })
                })
                .await
                .unwrap_or_else(|| Err(stopping()));
            match started {
                Ok((spec, first, since, epoch)) => Reply::Watch(Box::new(watch::Watch::new(
                    spec,
                    node.clone(),
                    head,
                    journal.clone(),
                    first,
                    (since, epoch),
                ))),
                Err(answer) => Reply::Json(answer),
            }
        }
        (op, _) => {
            let j = journal.clone();
            let read = req.method == "GET";
            let (answer, warnings, head) = node
                .query(move |core: &mut NodeCore| {
                    if let Op::Resource(r) = &op
                        && read
                    {
                        if !spaces::exists(core, &space, &named) {
                            return (spaces::missing(&space), Vec::new(), 0);
                        }
                        // A read starts its type's status journal (a watch may follow).
                        if let Ok(t) = r.resource_type(core, &space) {
                            j.with(|j| j.observe(core, &space, &t));
                        }
                    }
                    let (answer, warnings) = op.run(core, &space);
                    (answer, warnings, core.log().head().0)
                })
                .await
                .unwrap_or_else(|| (stopping(), Vec::new(), 0));
            if warnings.is_empty() && read {
                Reply::Json(answer)
            } else {
                // A write's answer says where it left the log, so that the door waits
                // for that commit without asking the node again.
                Reply::Warned {
                    answer,
                    warnings,
                    written_at: (!read).then_some(head),
                }
            }
        }
    };
    Some(reply)
}

/// `kubectl auth can-i`: whether the asking token's grant allows the verb in the space.
fn access_review(req: &Request<'_>, space: &str) -> Answer {
    let parsed = if req.content_type.contains("protobuf") {
        protobuf::decode(req.body).map_err(|e| e.to_string())
    } else {
        serde_json::from_slice::<Value>(req.body).map_err(|e| e.to_string())
    };
    let mut review = match parsed {
        Ok(v) => v,
        Err(e) => {
            return failure(
                400,
                "BadRequest",
                format!("the review does not parse: {e}"),
                None,
            );
        }
    };
    let verb = review["spec"]["resourceAttributes"]["verb"]
        .as_str()
        .unwrap_or("get");
    let write = !["get", "list", "watch"].contains(&verb);
    let (allowed, reason) = match req.grant.allows(Some(space), write) {
        Ok(()) => (
            true,
            format!("user {:?} may {verb} in space {space:?}", req.grant.user),
        ),
        Err(why) => (false, why.to_string()),
    };
    review["status"] = json!({ "allowed": allowed, "reason": reason });
    (201, review)
}

fn stopping() -> Answer {
    failure(
        503,
        "ServiceUnavailable",
        "the node is stopping".into(),
        None,
    )
}

/// What a request asks, with the door's own state of a resource request.
#[derive(Debug)]
enum Op {
    Other(Operation),
    Resource(Box<ResourceOp>),
}

/// A request on one resource type as it runs in the node's task.
#[derive(Debug)]
struct ResourceOp {
    req: ResourceRequest,
    /// What the request is warned about (`Warning` headers), collected as it runs.
    warnings: std::cell::RefCell<Vec<String>>,
}

impl std::ops::Deref for ResourceOp {
    type Target = ResourceRequest;

    fn deref(&self) -> &ResourceRequest {
        &self.req
    }
}

impl ResourceOp {
    fn new(req: ResourceRequest) -> ResourceOp {
        ResourceOp {
            req,
            warnings: std::cell::RefCell::default(),
        }
    }
}

impl Op {
    /// The answer, and the warnings that go with it.
    fn run(self, core: &mut NodeCore, space: &Space) -> (Answer, Vec<String>) {
        let not_found = |what: String| failure(404, "NotFound", what, None);
        let op = match self {
            Op::Resource(r) => {
                let answer = r.run(core, space);
                return (answer, r.warnings.take());
            }
            Op::Other(op) => op,
        };
        let answer = match op {
            Operation::Version => (200, discovery::version()),
            Operation::CoreVersions => (200, discovery::core_versions()),
            Operation::Groups => (
                200,
                discovery::groups(&Catalog::of_space(core.log(), space)),
            ),
            Operation::Group(g) => discovery::group(&Catalog::of_space(core.log(), space), &g)
                .map(|v| (200, v))
                .unwrap_or_else(|| not_found(format!("no API group {g:?}"))),
            Operation::Resources(g, v) => {
                discovery::resources(&Catalog::of_space(core.log(), space), &g, &v)
                    .map(|doc| (200, doc))
                    .unwrap_or_else(|| not_found(format!("no API group version {g}/{v}")))
            }
            // Parsed into `Op::Resource` above.
            Operation::Resource(r) => ResourceOp::new(*r).run(core, space),
        };
        (answer, Vec::new())
    }
}

impl ResourceOp {
    /// The type the path names.
    fn resource_type(&self, core: &NodeCore, space: &Space) -> Result<ResourceType, Answer> {
        let t = Catalog::builtin_by_resource(&self.group, &self.version, &self.plural)
            .cloned()
            .or_else(|| {
                Catalog::of_space(core.log(), space)
                    .by_resource(&self.group, &self.version, &self.plural)
                    .cloned()
            });
        let Some(t) = t else {
            let mut message = format!(
                "the server could not find the requested resource ({} {}/{})",
                self.plural, self.group, self.version
            );
            if let Some(kind) = self.body_kind() {
                message.push_str(&format!(
                    ": no type of space {:?} has kind {kind:?} in {}/{} (is its CustomResourceDefinition applied?)",
                    space.0, self.group, self.version
                ));
            }
            return Err(failure(404, "NotFound", message, None));
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

    /// The `kind` the request's body names, if it has one (for a clearer 404).
    fn body_kind(&self) -> Option<String> {
        let text = std::str::from_utf8(&self.body).ok()?;
        let v: Value = serde_json::from_str(text)
            .ok()
            .or_else(|| strata_manifest::yaml::from_str(text).ok())?;
        v["kind"].as_str().map(str::to_owned)
    }

    fn run(&self, core: &mut NodeCore, space: &Space) -> Answer {
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
            // What the clusters report: no one writes it.
            (m, _, _) if t.is_fleet_status() => failure(
                405,
                "MethodNotAllowed",
                format!(
                    "{} are read-only: they show what the clusters report ({m} is not allowed)",
                    t.plural
                ),
                None,
            ),
            ("POST", None, None) => self.create(core, &t, space),
            ("PUT", Some(name), None) => self.update(core, &t, space, name),
            ("PATCH", Some(name), None) => self.patch(core, &t, space, name),
            ("DELETE", Some(name), None) => self.delete(core, &t, space, name),
            ("DELETE", None, None) => self.delete_collection(core, &t, space),
            (m, _, _) => {
                let verb = match m {
                    "POST" => "create".to_owned(),
                    "PUT" => "update".to_owned(),
                    "PATCH" => "patch".to_owned(),
                    "DELETE" => "delete".to_owned(),
                    other => other.to_lowercase(),
                };
                Status::method_not_supported(&t.plural, &t.group, &verb).into()
            }
        }
    }

    fn key(&self, t: &ResourceType, space: &Space, name: &str) -> ObjectKey {
        ObjectKey::new(ObjectKeyParts {
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
        })
    }

    /// The stored object `key` names, whatever version it was written in: one lookup
    /// per version of its group the log holds (the log is ordered by space, group,
    /// version, kind), never a scan of the group's objects.
    fn find<'a>(core: &'a NodeCore, key: &ObjectKey) -> Option<&'a Object> {
        let log = core.log();
        if let Some(o) = log.get(key) {
            return Some(o);
        }
        // Every key of this space and group sorts after this one.
        let mut probe = ObjectKeyParts {
            space: key.space.clone(),
            group: key.group.clone(),
            version: String::new(),
            kind: String::new(),
            namespace: None,
            name: String::new(),
        };
        loop {
            let next = log
                .live_after(Some(&ObjectKey::new(probe.clone())))
                .next()?;
            let k = next.key();
            if k.space != key.space || k.group != key.group {
                return None;
            }
            if k.version != key.version {
                let mut candidate = ObjectKeyParts::clone(key);
                candidate.version = k.version.clone();
                if let Some(o) = log.get(&ObjectKey::new(candidate)) {
                    return Some(o);
                }
            }
            // Past every key of that version: a kind sorts before U+10FFFF.
            probe.version = k.version.clone();
            probe.kind = char::MAX.to_string();
        }
    }

    fn missing(t: &ResourceType, name: &str) -> Answer {
        Status::not_found(&t.plural, &t.group, name).into()
    }
}
