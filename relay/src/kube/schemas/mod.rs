//! The large read-only documents of a space: aggregated discovery, the OpenAPI v3
//! index and group-version documents, and OpenAPI v2. Only the space's [`Catalog`] is read inside
//! the node's task; the documents are built and encoded outside it, so that a client
//! fetching schemas never holds up writes.

use serde_json::Value;
use strata_protocol::model::Space;

use super::catalog::Catalog;
use super::{Reply, Request, aggregated, discovery, failure, openapi_v2, stopping};
use crate::tier::core::NodeCore;
use crate::tier::runtime::NodeClient;

/// A document in a given media type.
fn raw(code: u16, content_type: &str, body: Vec<u8>) -> Reply {
    Reply::Raw {
        code,
        content_type: content_type.to_owned(),
        body,
    }
}

fn json(content_type: &str, v: &Value) -> Reply {
    raw(200, content_type, v.to_string().into_bytes())
}

/// What kind of document `rest` asks for, if it is one of these.
enum Wanted {
    Aggregated { core: bool, version: &'static str },
    OpenApiIndex,
    OpenApiV3 { group: String, version: String },
    OpenApiV2,
}

/// Answers the request if it asks for one of these documents; `None` otherwise.
pub(super) async fn answer(
    node: &NodeClient,
    req: &Request<'_>,
    rest: &[&str],
    space: &str,
    prefix: &str,
) -> Option<Reply> {
    if req.method != "GET" {
        return None;
    }
    let wanted = match rest {
        ["api"] | ["apis"] => Wanted::Aggregated {
            core: rest == ["api"],
            version: aggregated::wanted(req.accept)?,
        },
        ["openapi", "v3"] => Wanted::OpenApiIndex,
        ["openapi", "v3", "api", v] => Wanted::OpenApiV3 {
            group: String::new(),
            version: (*v).to_owned(),
        },
        ["openapi", "v3", "apis", g, v] => Wanted::OpenApiV3 {
            group: (*g).to_owned(),
            version: (*v).to_owned(),
        },
        ["openapi", "v2"] => Wanted::OpenApiV2,
        _ => return None,
    };
    let space = Space(space.to_owned());
    let Some((catalog, head)) = node
        .query(move |core: &mut NodeCore| {
            (Catalog::of_space(core.log(), &space), core.log().head().0)
        })
        .await
    else {
        return Some(Reply::Json(stopping()));
    };
    Some(match wanted {
        Wanted::Aggregated { core, version } => json(
            &aggregated::content_type(version),
            &aggregated::list(&catalog, core, version),
        ),
        Wanted::OpenApiIndex => json(
            "application/json",
            &discovery::openapi_index(&catalog, prefix, head),
        ),
        Wanted::OpenApiV3 { group, version } => {
            match discovery::openapi_document(&catalog, &group, &version) {
                Some(doc) => json("application/json", &doc),
                None => Reply::Json(failure(
                    404,
                    "NotFound",
                    format!("no OpenAPI document for {group}/{version}"),
                    None,
                )),
            }
        }
        Wanted::OpenApiV2 => {
            let doc = openapi_v2::document(&catalog);
            if openapi_v2::wants_protobuf(req.accept) {
                raw(200, openapi_v2::PROTOBUF, openapi_v2::encode(&doc))
            } else {
                json("application/json", &doc)
            }
        }
    })
}
