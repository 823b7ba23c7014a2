//! The web view at `https://ROOT/ui/`: the hierarchy live, placements and rollouts,
//! and the actions a role allows, served by the root on its API port.
//!
//! | method | path | what |
//! |---|---|---|
//! | GET | `/ui/`, `/ui/app.js`, `/ui/app.css`, `/ui/icon.svg` | the page (embedded; no token needed, it holds no data) |
//! | GET | `/ui/login?code=C` | trades a one-time code for a session cookie ([`sessions`]) |
//! | POST | `/ui/login-codes` | a one-time code for the caller's token (what `relay ui` asks) |
//! | POST | `/ui/logout` | ends the session |
//! | GET | `/ui/api/whoami` | the caller's user, role, spaces and debug grant |
//! | GET | `/ui/api/tiers` | every relay with its link and subtree counts ([`fleet::tiers`]) |
//! | GET | `/ui/api/clusters?relay=R[&space=S]` | one relay's own clusters in full ([`fleet::clusters_of`]) |
//! | GET | `/ui/api/events` | the same as `tiers`, as server-sent events, sent when it changes |
//!
//! The page reads placements, fleet statuses and clusters through the Kubernetes API
//! and acts through it too (cordon is a Cluster's taint, a rollout's pause is the
//! Placement's annotation), with the session cookie in place of a bearer token, so
//! each role may do from the page exactly what it may do with kubectl, and every
//! action is in the audit log as any API write. A write carrying the cookie must also
//! carry the header `X-Strata-Csrf` (which a page of another site cannot add) and the
//! cookie is `SameSite=Strict`.
//!
//! The assets are embedded in the binary and ask for nothing outside the root (no CDN:
//! edge sites often have none); their Content-Security-Policy allows only the root.

use std::convert::Infallible;
use std::time::Duration;

use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use strata_node::clock::Clock;

use super::auth::{DebugGrant, Grant, Role};
use super::{ApiState, Body, error, param, reply};
use crate::tier::core::NodeCore;

mod fleet;
pub(crate) mod sessions;

pub(crate) use sessions::Sessions;

/// The header a write from the page carries (see the module's doc).
pub(crate) const CSRF_HEADER: &str = "x-strata-csrf";

/// How often the event stream looks for a change in what clusters report (a write at
/// the root wakes it at once).
const EVENT_TICK: Duration = Duration::from_secs(1);
/// The least time between two events, so that a burst of writes costs one event per
/// gap, not one per write.
const EVENT_GAP: Duration = Duration::from_millis(200);
/// The tiers go out again after this long even if only heartbeats moved, so that the
/// page's "heard 3s ago" stays true and proxies keep the stream open.
const REFRESH: Duration = Duration::from_secs(10);

const INDEX: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");
const ICON: &str = include_str!("assets/icon.svg");

/// Only the root itself: scripts, styles, images and connections.
const CSP: &str = "default-src 'self'; img-src 'self' data:; style-src 'self'; \
                   script-src 'self'; connect-src 'self'; frame-ancestors 'none'; \
                   base-uri 'none'; form-action 'self'";

fn asset(content_type: &'static str, body: &'static str) -> Response<Body> {
    let mut resp =
        crate::http::response(StatusCode::OK, content_type, body).map(BodyExt::boxed_unsync);
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    resp
}

fn redirect(to: &'static str) -> Response<Body> {
    let mut resp =
        crate::http::response(StatusCode::SEE_OTHER, "text/plain", "").map(BodyExt::boxed_unsync);
    resp.headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static(to));
    resp
}

fn page(status: StatusCode, text: &str) -> Response<Body> {
    let html = format!(
        "<!doctype html><meta charset=utf-8><title>Strata</title>\
         <link rel=stylesheet href=/ui/app.css><main class=notice><h1>Strata</h1><p>{}</p></main>",
        text.replace('&', "&amp;").replace('<', "&lt;")
    );
    let mut resp =
        crate::http::response(status, "text/html; charset=utf-8", html).map(BodyExt::boxed_unsync);
    resp.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    resp
}

/// The pages and the login: answered before any token is checked (they hold no data).
pub(super) async fn public(req: &Request<Incoming>, state: &ApiState) -> Option<Response<Body>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return None;
    }
    Some(match req.uri().path() {
        "/ui" => redirect("/ui/"),
        "/ui/" | "/ui/index.html" => asset("text/html; charset=utf-8", INDEX),
        "/ui/app.js" => asset("text/javascript; charset=utf-8", APP_JS),
        "/ui/app.css" => asset("text/css; charset=utf-8", APP_CSS),
        "/ui/icon.svg" => asset("image/svg+xml", ICON),
        "/ui/login" => {
            let query = super::parse_query(req.uri().query().unwrap_or(""));
            let code = param(&query, "code").unwrap_or_default();
            login(state, &code).await
        }
        _ => return None,
    })
}

async fn login(state: &ApiState, code: &str) -> Response<Body> {
    let now = tokio::time::Instant::now();
    match state.ui.redeem(code, now).await {
        Ok(Some(session)) => {
            let user = match state.ui.token(&session, now).await {
                Some(t) => state
                    .tokens
                    .current()
                    .grant(&t)
                    .map_or_else(|| "?".to_owned(), |g| g.user.clone()),
                None => "?".to_owned(),
            };
            super::audit::ui_login(&user);
            let mut resp = redirect("/ui/");
            let cookie = format!(
                "{}={session}; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age={}",
                sessions::COOKIE,
                sessions::SESSION_TTL.as_secs()
            );
            if let Ok(v) = HeaderValue::from_str(&cookie) {
                resp.headers_mut().insert(header::SET_COOKIE, v);
            }
            resp.headers_mut().insert(
                header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            );
            resp
        }
        Ok(None) => page(
            StatusCode::UNAUTHORIZED,
            "This login link was used already or has expired (links last two minutes and \
             work once). Run `relay ui` again for a new one.",
        ),
        Err(e) => page(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}

fn role_name(r: Role) -> &'static str {
    match r {
        Role::View => "view",
        Role::Edit => "edit",
        Role::Admin => "admin",
    }
}

/// The view's own API, for any user whose token or session is valid (a `view` token
/// included: asking for a login code or reading the tree writes nothing).
pub(super) async fn api(
    state: &ApiState,
    grant: &Grant,
    session: Option<&str>,
    method: &Method,
    p: &[&str],
    query: &[(String, String)],
) -> Option<Response<Body>> {
    let resp = match (method, p) {
        // A session stands for a token of the tokens file; a user of a client
        // certificate or an ID token has none to stand for.
        (&Method::POST, ["ui", "login-codes"]) if grant.via != super::auth::Authn::Token => error(
            StatusCode::FORBIDDEN,
            format!(
                "user {:?} authenticated by {}: the web view logs in with a token of the tokens file",
                grant.user, grant.via
            ),
        ),
        (&Method::POST, ["ui", "login-codes"]) => {
            match state
                .ui
                .new_code(&grant.token, tokio::time::Instant::now())
                .await
            {
                Ok(code) => {
                    super::audit::ui_code(&grant.user);
                    reply(
                        StatusCode::OK,
                        json!({
                            "code": code,
                            "path": format!("/ui/login?code={code}"),
                            "expiresInSeconds": sessions::CODE_TTL.as_secs(),
                        }),
                    )
                }
                Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
            }
        }
        (&Method::POST, ["ui", "logout"]) => {
            if let Some(s) = session {
                state.ui.end(s).await;
            }
            let mut resp = reply(StatusCode::OK, json!({ "loggedOut": true }));
            let clear = format!(
                "{}=; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age=0",
                sessions::COOKIE
            );
            if let Ok(v) = HeaderValue::from_str(&clear) {
                resp.headers_mut().insert(header::SET_COOKIE, v);
            }
            resp
        }
        (&Method::GET, ["ui", "api", "whoami"]) => reply(
            StatusCode::OK,
            json!({
                "user": grant.user,
                "role": role_name(grant.role),
                "spaces": grant.spaces,
                "debug": match &grant.debug {
                    DebugGrant::None => Value::Null,
                    DebugGrant::All => json!("*"),
                    DebugGrant::Selector(s) => json!(s),
                },
            }),
        ),
        (&Method::GET, ["ui", "api", "tiers"]) => match state.node.query(tiers_now).await {
            Some(v) => reply(StatusCode::OK, v),
            None => error(StatusCode::SERVICE_UNAVAILABLE, "the node is stopping"),
        },
        (&Method::GET, ["ui", "api", "clusters"]) => {
            let space = param(query, "space").unwrap_or_else(|| "default".to_owned());
            let Some(relay) = param(query, "relay") else {
                return Some(error(
                    StatusCode::BAD_REQUEST,
                    "relay: name the relay whose clusters to list (?relay=NAME)",
                ));
            };
            if let Err(why) = grant.allows(Some(&space), false) {
                return Some(error(StatusCode::FORBIDDEN, why.to_string()));
            }
            let space = match super::space_of(&space) {
                Ok(s) => s,
                Err(resp) => return Some(*resp),
            };
            let relay = crate::kube::decode(&relay);
            let now = Clock::start().wall();
            match state
                .node
                .query(move |core| {
                    let mut v = fleet::clusters_of(core, &relay, &space, now);
                    v["now"] = json!(now.0);
                    v
                })
                .await
            {
                Some(v) => reply(StatusCode::OK, v),
                None => error(StatusCode::SERVICE_UNAVAILABLE, "the node is stopping"),
            }
        }
        (&Method::GET, ["ui", "api", "events"]) => events(state.node.clone()),
        (_, ["ui", ..]) => error(
            StatusCode::NOT_FOUND,
            format!("no such endpoint: {method} /{}", p.join("/")),
        ),
        _ => return None,
    };
    Some(resp)
}

fn tiers_now(core: &mut NodeCore) -> Value {
    let now = Clock::start().wall();
    let mut v = fleet::tiers(core);
    v["now"] = json!(now.0);
    v
}

/// The tiers without what moves at every heartbeat (each link's `lastHeard`): what
/// the event stream compares to decide whether anything changed.
fn without_heartbeats(tiers: &Value) -> Value {
    let mut v = tiers.clone();
    if let Some(relays) = v["relays"].as_array_mut() {
        for r in relays {
            if let Some(link) = r["link"].as_object_mut() {
                link.remove("lastHeard");
            }
        }
    }
    v
}

/// The tiers as server-sent events: one `tiers` event at once, then one each time they
/// change (looked at every [`EVENT_TICK`] and at each commit at the root, at most once
/// per [`EVENT_GAP`]; heartbeats alone do not count) and at least every [`REFRESH`]. Ends when the node stops or the page goes away (the body is
/// dropped).
fn events(node: crate::tier::runtime::NodeClient) -> Response<Body> {
    struct Follow {
        node: crate::tier::runtime::NodeClient,
        head: tokio::sync::watch::Receiver<u64>,
        last: Option<Value>,
        sent_at: tokio::time::Instant,
        first: bool,
    }
    let start = Follow {
        head: node.head_changes(),
        node,
        last: None,
        sent_at: tokio::time::Instant::now(),
        first: true,
    };
    let stream = futures::stream::unfold(start, |mut f| async move {
        loop {
            if !f.first {
                tokio::time::sleep_until(f.sent_at + EVENT_GAP).await;
                tokio::select! {
                    changed = f.head.changed() => if changed.is_err() {
                        // The node is stopping: the query below ends the stream.
                        tokio::time::sleep(EVENT_TICK).await;
                    },
                    () = tokio::time::sleep(EVENT_TICK) => {}
                }
            }
            f.first = false;
            let now = Clock::start().wall();
            let mut tiers = f.node.query(fleet::tiers).await?;
            let key = without_heartbeats(&tiers);
            if f.last.as_ref() != Some(&key) || f.sent_at.elapsed() >= REFRESH {
                tiers["now"] = json!(now.0);
                f.last = Some(key);
                f.sent_at = tokio::time::Instant::now();
                let frame = format!("event: tiers\ndata: {tiers}\n\n");
                return Some((Ok::<_, Infallible>(Frame::data(Bytes::from(frame))), f));
            }
        }
    });
    let mut resp = Response::new(BodyExt::boxed_unsync(StreamBody::new(stream)));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// Whether a request may go on: one authenticated by the session cookie that writes
/// must carry [`CSRF_HEADER`].
pub(super) fn csrf_ok(by_cookie: bool, method: &Method, headers: &hyper::HeaderMap) -> bool {
    let write = method != Method::GET && method != Method::HEAD;
    !(by_cookie && write) || headers.contains_key(CSRF_HEADER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_by_cookie_need_the_csrf_header() {
        let mut h = hyper::HeaderMap::new();
        assert!(csrf_ok(true, &Method::GET, &h));
        assert!(!csrf_ok(true, &Method::PUT, &h));
        assert!(csrf_ok(false, &Method::PUT, &h));
        h.insert(CSRF_HEADER, HeaderValue::from_static("1"));
        assert!(csrf_ok(true, &Method::PUT, &h));
    }

    #[test]
    fn the_assets_ask_for_nothing_outside_the_root() {
        for (name, text) in [
            ("index.html", INDEX),
            ("app.js", APP_JS),
            ("app.css", APP_CSS),
        ] {
            for far in ["http://", "https://", "//cdn", "@import"] {
                let hits: Vec<&str> = text
                    .lines()
                    .filter(|l| l.contains(far) && !l.contains("www.w3.org/2000/svg"))
                    .collect();
                assert!(hits.is_empty(), "{name} reaches outside the root: {hits:?}");
            }
        }
    }
}
