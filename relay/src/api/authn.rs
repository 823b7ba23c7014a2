//! Who a request is from, in kube-apiserver's order: a client certificate from the CA
//! `api.client_certificates` names; else a bearer token, one of the tokens file or an
//! ID token of the issuer `api.oidc` names; else the web view's session cookie. A user
//! of a certificate or an ID token gets the role the configuration maps its name or
//! groups to ([`crate::identity::RoleRules`]); what a token of the file may do is its
//! line's ([`super::auth`]). Refusals are a `metav1.Status` saying why, and those of a
//! certificate or an ID token are audited.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};

use super::auth::{Authn, Grant, Tokens};
use super::{ApiState, Body, audit, reply, ui};
use crate::identity::oidc::Oidc;
use crate::identity::x509::CertUserError;
use crate::identity::{RoleRules, Subject};

/// The users besides the tokens file: client certificates and OIDC, if configured.
#[derive(Debug, Default)]
pub(super) struct Authenticators {
    /// The roles of client certificates' users.
    pub(super) client_certificates: Option<RoleRules>,
    /// The OIDC issuer.
    pub(super) oidc: Option<Oidc>,
}

/// What one TLS connection proved: its client certificate's user, if it presented one,
/// and whether a request on it was audited as authenticated yet.
#[derive(Debug)]
pub(super) struct Connection {
    pub(super) peer: SocketAddr,
    pub(super) certificate: Option<Result<Subject, CertUserError>>,
    audited: AtomicBool,
}

impl Connection {
    /// The connection from `peer`, with the certificate chain it presented (verified by
    /// TLS against the users' CA).
    pub(super) fn new(
        peer: SocketAddr,
        certs: Option<&[rustls_pki_types::CertificateDer<'_>]>,
    ) -> Connection {
        Connection {
            peer,
            certificate: certs
                .and_then(|c| c.first())
                .map(|leaf| crate::identity::x509::subject(leaf.as_ref())),
            audited: AtomicBool::new(false),
        }
    }
}

/// The request's user: its grant, and the web view's session if that is what stood for
/// a token; or the refusal to answer.
pub(super) struct Authenticated<'t> {
    pub(super) grant: Cow<'t, Grant>,
    pub(super) session: Option<String>,
}

/// Authenticates `req` (see the module's doc).
pub(super) async fn authenticate<'t>(
    req: &Request<Incoming>,
    state: &ApiState,
    tokens: &'t Arc<Tokens>,
    conn: &Connection,
) -> Result<Authenticated<'t>, Box<Response<Body>>> {
    if let (Some(cert), Some(rules)) = (&conn.certificate, &state.authn.client_certificates) {
        let subject = cert.as_ref().map_err(|e| {
            audit::authn_refused(Authn::ClientCertificate, "", conn.peer, 401, &e.to_string());
            unauthorized(e.to_string())
        })?;
        let grant = mapped(rules, subject, Authn::ClientCertificate, conn)?;
        return Ok(Authenticated {
            grant: Cow::Owned(grant),
            session: None,
        });
    }
    let bearer = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    if let Some(token) = bearer {
        if let Some(grant) = tokens.grant(token) {
            return Ok(Authenticated {
                grant: Cow::Borrowed(grant),
                session: None,
            });
        }
        // An ID token is a JWT: three base64url parts.
        if let Some(oidc) = &state.authn.oidc
            && token.split('.').count() == 3
        {
            let now = strata_node::clock::Clock::start().wall().0 / 1000;
            let subject = oidc.subject(token, now).await.map_err(|e| {
                let why = format!("OIDC ID token refused: {e}");
                audit::authn_refused(Authn::Oidc, "", conn.peer, 401, &why);
                unauthorized(why)
            })?;
            let grant = mapped(&oidc.config().roles, &subject, Authn::Oidc, conn)?;
            return Ok(Authenticated {
                grant: Cow::Owned(grant),
                session: None,
            });
        }
        return Err(unauthorized("missing or unknown bearer token".to_owned()));
    }
    let session = req
        .headers()
        .get_all(hyper::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(ui::sessions::from_cookie)
        .map(str::to_owned);
    let Some(session) = session else {
        return Err(unauthorized("missing or unknown bearer token".to_owned()));
    };
    let token = state.ui.token(&session, tokio::time::Instant::now()).await;
    match token.as_deref().and_then(|t| tokens.grant(t)) {
        Some(grant) => Ok(Authenticated {
            grant: Cow::Borrowed(grant),
            session: Some(session),
        }),
        None => Err(unauthorized(
            "the web view's session has ended; run `relay ui` for a new login link".to_owned(),
        )),
    }
}

/// The grant `rules` give `subject`, or a 403 saying that none does (audited).
fn mapped(
    rules: &RoleRules,
    subject: &Subject,
    via: Authn,
    conn: &Connection,
) -> Result<Grant, Box<Response<Body>>> {
    let Some(grant) = rules.grant(subject, via) else {
        let section = match via {
            Authn::Oidc => "api.oidc",
            _ => "api.client_certificates",
        };
        let why = format!(
            "user {:?} (groups: {}) is authenticated by {via}, but {section} maps neither it nor its groups to a role",
            subject.user,
            subject.groups.join(", ")
        );
        audit::authn_refused(via, &subject.user, conn.peer, 403, &why);
        let (_, status) = crate::kube::failure(403, "Forbidden", why, None);
        return Err(Box::new(reply(StatusCode::FORBIDDEN, status)));
    };
    if !conn.audited.swap(true, Ordering::Relaxed) {
        audit::authn_accepted(&grant, conn.peer);
    }
    Ok(grant)
}

/// A 401 as a `metav1.Status`, so that Kubernetes clients say what is wrong.
fn unauthorized(message: String) -> Box<Response<Body>> {
    let (_, status) = crate::kube::failure(401, "Unauthorized", message, None);
    Box::new(reply(StatusCode::UNAUTHORIZED, status))
}
