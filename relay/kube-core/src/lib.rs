//! The root's Kubernetes API without a runtime, as kube-rs's `kube-core` is to its
//! client: the API's types and rules, testable without tokio, hyper or the node core.
//! The async door that serves them from the node's state is `strata_relay::kube`.
//!
//! # Layout
//!
//! - [`status`]: `metav1.Status`, typed ([`Status`]), worded as kube-apiserver words it.
//! - [`params`]: list and watch query parameters ([`ListParams`], [`WatchParams`]).
//! - [`request`]: a request's path and query parsed into an [`Operation`].
//! - [`catalog`]: the resource types of a space (built-in, CRDs, Strata's own).
//! - [`discovery`], [`aggregated`]: discovery documents, plain and aggregated.
//! - [`openapi`], [`openapi_v2`]: the OpenAPI v3 and v2 documents with every kind's
//!   schema; [`protobuf`]: request bodies in Kubernetes' protobuf encoding, for every
//!   built-in kind (the decoder lives in `strata-kube-builtins`, beside the kinds' table).
//! - [`schema_check`]: custom resources checked against their CRD's schema.
//! - [`ssa`]: server-side apply (managed fields, conflicts).
//! - [`deletion`]: `DeleteOptions`, preconditions, finalizers and `deletionTimestamp`,
//!   which kinds a delete answers with the object.
//! - [`kubeconfig`]: a kubeconfig for a space.
//! - [`decode`], [`patch`], [`selector`]: request texts, from `strata-manifest`.

pub mod aggregated;
pub mod catalog;
pub mod deletion;
pub mod discovery;
pub mod kubeconfig;
pub mod openapi;
pub mod openapi_v2;
pub mod params;
pub mod request;
pub mod schema_check;
pub mod ssa;
pub mod status;

// Request texts are parsed by a crate without the runtime, which the fuzz targets use.
pub use strata_manifest::{decode, patch, selector};
// Protobuf bodies are decoded by the crate of the built-in kinds, which the fuzz target
// of the decoder links without k8s-openapi.
pub use strata_kube_builtins::protobuf;

pub use params::{ListParams, ParamError, WatchParams};
pub use request::{ApiRequest, Operation, ResourceRequest};
pub use status::Status;

use serde_json::Value;

/// An answer: HTTP status and a JSON body.
pub type Answer = (u16, Value);

/// A `metav1.Status` failure as an [`Answer`] (see [`Status::failure`]).
pub fn failure(code: u16, reason: &str, message: String, details: Option<Value>) -> Answer {
    Status::failure(code, reason, message, details).into()
}

/// The kinds with a `scale` subresource.
pub const SCALABLE: [&str; 4] = [
    "Deployment",
    "StatefulSet",
    "ReplicaSet",
    "ReplicationController",
];
