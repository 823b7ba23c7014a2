//! The OIDC issuer's keys, as kube-apiserver's `--oidc-issuer-url` finds them: its
//! discovery document (`ISSUER/.well-known/openid-configuration`, whose `issuer` must be
//! the configured URL) names `jwks_uri`; both are fetched over HTTPS, the issuer's
//! certificate checked against `api.oidc.ca` (through `HTTPS_PROXY` unless `NO_PROXY`
//! exempts it, as the CLI's client). The keys are fetched at the first token and again
//! when a token names a key not seen yet (an issuer that rotated its keys), at most
//! once every [`REFETCH_AFTER`]; an issuer that cannot be reached refuses tokens (401,
//! saying why) and does not stop the root.

use std::sync::Arc;
use std::time::Duration;

use hyper::{Method, StatusCode};
use serde_json::Value;
use strata_node::dial::ParentAddress;

use super::jwt::{self, Expect, Jwks, TokenError};
use super::{OidcConfig, Subject};
use crate::client::ApiClient;

/// The least time between two fetches of the issuer's keys.
pub const REFETCH_AFTER: Duration = Duration::from_secs(10);

/// How long one fetch may take.
const FETCH_WITHIN: Duration = Duration::from_secs(10);

/// Why an ID token was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    /// The token itself.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// The issuer's keys could not be had.
    #[error("the issuer's keys: {0}")]
    Keys(String),
}

/// Why the OIDC issuer cannot be used at all.
#[derive(Debug, thiserror::Error)]
pub enum OidcSetupError {
    /// The URL is not `https://host[:port][/path]`.
    #[error("api.oidc.issuer_url {url:?}: {why}")]
    Url {
        /// The URL.
        url: String,
        /// What is wrong.
        why: String,
    },
    /// Its CA file.
    #[error("api.oidc.ca: {0}")]
    Ca(#[from] strata_node::tls::TlsError),
}

/// Where an HTTPS URL points: a client for its host and the path.
fn https(url: &str, ca: &std::path::Path) -> Result<(ApiClient, String), OidcSetupError> {
    let bad = |why: &str| OidcSetupError::Url {
        url: url.to_owned(),
        why: why.to_owned(),
    };
    let rest = url
        .strip_prefix("https://")
        .ok_or_else(|| bad("not an https:// URL"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (host, with_port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => {
            if p.parse::<u16>().is_err() {
                return Err(bad("the port is not a number"));
            }
            (h, authority.to_owned())
        }
        _ => (authority, format!("{authority}:443")),
    };
    let addr: ParentAddress = with_port.parse().map_err(|e: String| bad(&e))?;
    let name = host.trim_start_matches('[').trim_end_matches(']');
    let client = ApiClient::at(addr, name, ca, "")?;
    Ok((client, path.to_owned()))
}

/// The issuer's keys as last fetched.
#[derive(Debug, Default)]
struct Cache {
    keys: Arc<Jwks>,
    fetched: Option<tokio::time::Instant>,
}

/// An OIDC issuer the root trusts: checks ID tokens against its keys.
#[derive(Debug)]
pub struct Oidc {
    config: OidcConfig,
    discovery: (ApiClient, String),
    cache: tokio::sync::Mutex<Cache>,
}

impl Oidc {
    /// Sets up the issuer of `config` (nothing is fetched yet).
    pub fn new(config: OidcConfig) -> Result<Oidc, OidcSetupError> {
        let url = format!(
            "{}/.well-known/openid-configuration",
            config.issuer_url.trim_end_matches('/')
        );
        let discovery = https(&url, &config.ca)?;
        Ok(Oidc {
            config,
            discovery,
            cache: tokio::sync::Mutex::new(Cache::default()),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &OidcConfig {
        &self.config
    }

    /// Checks an ID token at `now` (Unix seconds); the user and groups it names.
    pub async fn subject(&self, token: &str, now: u64) -> Result<Subject, OidcError> {
        let parts = jwt::parts(token)?;
        let keys = self.keys_for(parts.kid.as_deref()).await?;
        let claims = parts.verify(
            &keys,
            Expect {
                issuer: &self.config.issuer_url,
                audience: &self.config.audience,
                now,
            },
        )?;
        Ok(jwt::subject(
            &claims,
            &self.config.username_claim,
            self.config.groups_claim.as_deref(),
        )?)
    }

    /// The keys, fetched again first when `kid` is not among them and the last fetch
    /// is old enough.
    async fn keys_for(&self, kid: Option<&str>) -> Result<Arc<Jwks>, OidcError> {
        let mut cache = self.cache.lock().await;
        let recent = cache.fetched.is_some_and(|t| t.elapsed() < REFETCH_AFTER);
        if cache.keys.has(kid) || recent {
            return Ok(cache.keys.clone());
        }
        cache.fetched = Some(tokio::time::Instant::now());
        let keys = tokio::time::timeout(FETCH_WITHIN, self.fetch())
            .await
            .map_err(|_| OidcError::Keys(format!("no answer within {FETCH_WITHIN:?}")))??;
        tracing::info!(issuer = %self.config.issuer_url, keys = keys.len(), "OIDC issuer's keys fetched");
        cache.keys = Arc::new(keys);
        Ok(cache.keys.clone())
    }

    async fn fetch(&self) -> Result<Jwks, OidcError> {
        let (client, path) = &self.discovery;
        let doc = get(client, path).await?;
        let issuer = doc["issuer"].as_str().unwrap_or_default();
        if issuer != self.config.issuer_url {
            return Err(OidcError::Keys(format!(
                "the discovery document names issuer {issuer:?}, not {:?}",
                self.config.issuer_url
            )));
        }
        let jwks_uri = doc["jwks_uri"]
            .as_str()
            .ok_or_else(|| OidcError::Keys("the discovery document has no jwks_uri".into()))?;
        let (client, path) =
            https(jwks_uri, &self.config.ca).map_err(|e| OidcError::Keys(e.to_string()))?;
        let jwks = get(&client, &path).await?;
        Jwks::parse(&jwks).map_err(|e| OidcError::Keys(format!("{jwks_uri}: {e}")))
    }
}

async fn get(client: &ApiClient, path: &str) -> Result<Value, OidcError> {
    let where_ = format!("https://{}{path}", client.addr());
    let (code, doc) = client
        .request(Method::GET, path, None)
        .await
        .map_err(|e| OidcError::Keys(format!("{where_}: {e}")))?;
    if code != StatusCode::OK {
        return Err(OidcError::Keys(format!("{where_}: answered {code}")));
    }
    Ok(doc)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn issuer_urls_name_a_host_a_port_and_a_path() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("missing.crt");
        // The CA is read when the client is made: a missing one is named.
        let e = https("https://issuer.example.com/realms/x", &ca).unwrap_err();
        assert!(e.to_string().contains("missing.crt"), "{e}");
        let e = https("http://issuer", &ca).unwrap_err().to_string();
        assert!(e.contains("not an https:// URL"), "{e}");
        let e = https("https://issuer:x/", &ca).unwrap_err().to_string();
        assert!(e.contains("the port is not a number"), "{e}");
    }
}
