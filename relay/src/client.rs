//! The CLI's client of the root's API: HTTPS (the root verified against the CA) with a
//! bearer token.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use serde_json::Value;
use tokio_rustls::TlsConnector;

/// Where the API is and how to prove who we are.
#[derive(Debug, Clone)]
pub struct ApiClient {
    addr: SocketAddr,
    server_name: String,
    tls: Arc<rustls::ClientConfig>,
    token: String,
}

impl ApiClient {
    /// A client of the API at `addr`, whose certificate must name `server_name`.
    pub fn new(
        addr: SocketAddr,
        server_name: &str,
        ca: &std::path::Path,
        token: &str,
    ) -> anyhow::Result<Self> {
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
    ) -> anyhow::Result<(StatusCode, Value)> {
        let tcp = tokio::net::TcpStream::connect(self.addr)
            .await
            .with_context(|| format!("cannot reach the API at {}", self.addr))?;
        let name = ServerName::try_from(self.server_name.clone())
            .with_context(|| format!("{:?} is not a valid server name", self.server_name))?;
        let tls = TlsConnector::from(self.tls.clone())
            .connect(name, tcp)
            .await
            .with_context(|| {
                format!(
                    "TLS with the API at {} (is {:?} the root's name, and --ca its CA?)",
                    self.addr, self.server_name
                )
            })?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        let driver = tokio::spawn(conn);
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, self.server_name.as_str())
            .header(
                hyper::header::AUTHORIZATION,
                format!("Bearer {}", self.token),
            )
            .body(Full::new(Bytes::from(body.unwrap_or_default())))?;
        let resp = sender
            .send_request(req)
            .await
            .context("the API did not answer")?;
        let status = resp.status();
        let bytes = resp.into_body().collect().await?.to_bytes();
        driver.abort();
        let value = serde_json::from_slice(&bytes)
            .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        Ok((status, value))
    }
}
