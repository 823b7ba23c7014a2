//! The CLI's client of the root's API: HTTPS (the root verified against the CA) with a
//! bearer token, through the proxy `HTTPS_PROXY` names (`NO_PROXY` honoured).

use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use serde_json::Value;
use strata_node::dial::ParentAddress;
use strata_node::proxy::Proxy;
use tokio_rustls::TlsConnector;

/// Why a request to the API got no answer. (An answer with an error status is an
/// answer: [`ApiClient::request`] returns it.) Each variant names the address or the
/// server name it was trying, and carries the cause as its `source`.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // the fields are the address, the name and the cause
pub enum RequestError {
    /// No TCP connection to the API's address (a name resolved at every request).
    #[error("cannot reach the API at {addr}: {detail}")]
    Connect { addr: String, detail: String },
    /// The root's name cannot be checked against a certificate.
    #[error("{name:?} is not a valid server name")]
    ServerName {
        name: String,
        source: rustls_pki_types::InvalidDnsNameError,
    },
    /// The TLS handshake failed: most often the wrong root name or CA.
    #[error("TLS with the API at {addr} (is {name:?} the root's name, and --ca its CA?)")]
    Tls {
        addr: String,
        name: String,
        source: std::io::Error,
    },
    /// HTTP failed on the connection (handshake or body).
    #[error(transparent)]
    Http(#[from] hyper::Error),
    /// The request could not be built (a path that is no URI).
    #[error(transparent)]
    Build(#[from] hyper::http::Error),
    /// The request was sent and no response came back.
    #[error("the API did not answer")]
    NoAnswer { source: hyper::Error },
    /// The proxy `HTTPS_PROXY` names refused or failed (it is named in the message).
    #[error("reaching the API at {addr}: {source}")]
    Proxy {
        addr: String,
        source: strata_node::proxy::ProxyError,
    },
}

/// Where the API is and how to prove who we are.
#[derive(Debug, Clone)]
pub struct ApiClient {
    addr: ParentAddress,
    server_name: String,
    tls: Arc<rustls::ClientConfig>,
    token: String,
}

impl ApiClient {
    /// The API's address (a name is resolved at each connection).
    pub fn addr(&self) -> &ParentAddress {
        &self.addr
    }

    /// A client of the API at `addr`, whose certificate must name `server_name`.
    pub fn new(
        addr: SocketAddr,
        server_name: &str,
        ca: &std::path::Path,
        token: &str,
    ) -> Result<Self, strata_node::tls::TlsError> {
        Self::at(addr.into(), server_name, ca, token)
    }

    /// [`ApiClient::at`] with the CA as PEM (a kubeconfig's
    /// `certificate-authority-data`; `from` names the kubeconfig in errors).
    pub fn at_with_ca_pem(
        addr: ParentAddress,
        server_name: &str,
        ca_pem: &[u8],
        from: &std::path::Path,
        token: &str,
    ) -> Result<Self, strata_node::tls::TlsError> {
        Ok(ApiClient {
            addr,
            server_name: server_name.to_owned(),
            tls: strata_node::tls::api_client_config_pem(ca_pem, from)?,
            token: token.to_owned(),
        })
    }

    /// [`ApiClient::at_with_ca_pem`] that presents a client certificate instead of a
    /// token (PEM, a kubeconfig user's; `from` names the kubeconfig in errors).
    pub fn at_with_certificate(
        addr: ParentAddress,
        server_name: &str,
        ca_pem: &[u8],
        (cert_pem, key_pem): (&[u8], &[u8]),
        from: &std::path::Path,
    ) -> Result<Self, strata_node::tls::TlsError> {
        Ok(ApiClient {
            addr,
            server_name: server_name.to_owned(),
            tls: strata_node::tls::api_client_config_pem_with_certificate(
                ca_pem, cert_pem, key_pem, from,
            )?,
            token: String::new(),
        })
    }

    /// A client of the API at `addr`: `IP:PORT`, or `host:port` resolved at every
    /// request (a load balancer's DNS name), its certificate naming `server_name`.
    pub fn at(
        addr: ParentAddress,
        server_name: &str,
        ca: &std::path::Path,
        token: &str,
    ) -> Result<Self, strata_node::tls::TlsError> {
        Ok(ApiClient {
            addr,
            server_name: server_name.to_owned(),
            tls: strata_node::tls::api_client_config(ca)?,
            token: token.to_owned(),
        })
    }

    /// Sends one request; returns the status and the JSON body.
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Value), RequestError> {
        // Through the proxy `HTTPS_PROXY` names unless `NO_PROXY` exempts the root; TLS
        // runs end to end inside the tunnel.
        let addr = self.addr.to_string();
        let proxy_err = |source| RequestError::Proxy {
            addr: addr.clone(),
            source,
        };
        let tcp = match Proxy::from_env(&self.addr.host()).map_err(proxy_err)? {
            Some(proxy) => proxy.tunnel(&addr).await.map_err(proxy_err)?,
            // A name is resolved now, every address tried (happy eyeballs).
            None => strata_node::dial::tcp_happy_eyeballs(&addr)
                .await
                .map_err(|detail| RequestError::Connect {
                    addr: addr.clone(),
                    detail: detail.to_string(),
                })?,
        };
        let name = ServerName::try_from(self.server_name.clone()).map_err(|source| {
            RequestError::ServerName {
                name: self.server_name.clone(),
                source,
            }
        })?;
        let tls = TlsConnector::from(self.tls.clone())
            .connect(name, tcp)
            .await
            .map_err(|source| RequestError::Tls {
                addr: addr.clone(),
                name: self.server_name.clone(),
                source,
            })?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        let driver = tokio::spawn(conn);
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, self.server_name.as_str());
        // No token, no credentials (an OIDC issuer's public documents).
        if !self.token.is_empty() {
            req = req.header(
                hyper::header::AUTHORIZATION,
                format!("Bearer {}", self.token),
            );
        }
        let req = req.body(Full::new(Bytes::from(body.unwrap_or_default())))?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|source| RequestError::NoAnswer { source })?;
        let status = resp.status();
        let bytes = resp.into_body().collect().await?.to_bytes();
        driver.abort();
        let value = serde_json::from_slice(&bytes)
            .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        Ok((status, value))
    }
}
