//! Which spaces exist. A space is made by its first write, so there is nothing to
//! create beforehand; yet a read of a space nothing made (a typo in a kubeconfig's
//! `server:`) must not look like an empty space. A space exists when:
//! - it is `default` (what `https://ROOT/` serves);
//! - a token names it (`spaces=team-a,team-b` in the tokens file: its admin made it);
//! - or it holds an object.
//!
//! A get, list or watch of a space that does not exist is answered 404 with a Status
//! naming the space. Discovery and the schemas are served for every space, and writes
//! are taken, so that kubectl and Helm can make the first write (a client-side
//! `kubectl apply` reads the object first and creates it on this 404, as on any
//! NotFound).

use std::collections::BTreeSet;

use serde_json::json;
use strata_protocol::model::Space;

use crate::kube::{Answer, failure};
use crate::tier::core::NodeCore;

/// The space `/` serves, which always exists.
pub const DEFAULT: &str = "default";

/// Whether `space` exists; `named` holds the spaces the tokens name.
pub fn exists(core: &NodeCore, space: &Space, named: &BTreeSet<String>) -> bool {
    space.0 == DEFAULT
        || named.contains(&space.0)
        || core.log().live().any(|o| o.key().space == *space)
}

/// The 404 for a read of `space`, which does not exist.
pub fn missing(space: &Space) -> Answer {
    failure(
        404,
        "NotFound",
        format!(
            "space {:?} does not exist: it holds no object and no token names it (the \
             first write into a space creates it)",
            space.0
        ),
        Some(json!({ "name": space.0, "kind": "spaces" })),
    )
}
