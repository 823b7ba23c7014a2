//! Identity providers a root's tests trust: [`OidcIssuer`], an OpenID Connect issuer
//! on loopback (HTTPS, its discovery document and JWKS, ES256 ID tokens signed with
//! ring), and [`UserCa`], a CA issuing users' client certificates (CN the user, O the
//! group), as kube-apiserver's `--client-ca-file` reads them.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
use serde_json::{Value, json};

/// A CA and the certificates it issued, as PEM.
pub struct UserCa {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

impl std::fmt::Debug for UserCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserCa").finish_non_exhaustive()
    }
}

/// A certificate and its key, PEM.
#[derive(Debug, Clone)]
pub struct Issued {
    /// The certificate.
    pub cert_pem: String,
    /// Its private key.
    pub key_pem: String,
}

impl UserCa {
    /// A new CA named `name`.
    ///
    /// # Panics
    ///
    /// When rcgen fails.
    pub fn new(name: &str) -> UserCa {
        let key = rcgen::KeyPair::generate().expect("a CA key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).expect("a CA certificate");
        UserCa { cert, key }
    }

    /// The CA's certificate.
    pub fn cert_pem(&self) -> String {
        self.cert.pem()
    }

    /// A client certificate for user `cn` in group `org` (if any).
    ///
    /// # Panics
    ///
    /// When rcgen fails.
    pub fn client(&self, cn: &str, org: Option<&str>) -> Issued {
        let key = rcgen::KeyPair::generate().expect("a key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        if let Some(o) = org {
            params
                .distinguished_name
                .push(rcgen::DnType::OrganizationName, o);
        }
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .expect("a client certificate");
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// A server certificate for `127.0.0.1` and `localhost`.
    fn server(&self) -> Issued {
        let key = rcgen::KeyPair::generate().expect("a key");
        let params =
            rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .expect("params");
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .expect("a server certificate");
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

/// An OpenID Connect issuer on loopback: `https://127.0.0.1:PORT`, serving
/// `/.well-known/openid-configuration` and `/jwks` (one P-256 key, id `key-1`) over TLS
/// from its own CA ([`OidcIssuer::ca_pem`]). Dropping it stops the server.
#[derive(Debug)]
pub struct OidcIssuer {
    url: String,
    ca_pem: String,
    key: Arc<EcdsaKeyPair>,
    fetches: Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for OidcIssuer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The key id the issuer signs with.
pub const KID: &str = "key-1";

impl OidcIssuer {
    /// Starts the issuer on the current runtime.
    ///
    /// # Panics
    ///
    /// When the port cannot be bound or a key made.
    pub async fn start() -> OidcIssuer {
        let ca = UserCa::new("oidc-issuer-ca");
        let server = ca.server();
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .expect("a signing key");
        let key = Arc::new(
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
                .expect("the signing key"),
        );
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .expect("bind the issuer");
        let addr = listener.local_addr().expect("its address");
        let url = format!("https://{addr}");
        let point = key.public_key().as_ref();
        let jwks = json!({ "keys": [ { "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256",
            "kid": KID, "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..]) } ] })
        .to_string();
        let discovery = json!({ "issuer": url, "jwks_uri": format!("{url}/jwks"),
            "id_token_signing_alg_values_supported": ["ES256"] })
        .to_string();
        let tls = {
            use rustls_pki_types::pem::PemObject as _;
            let certs =
                rustls_pki_types::CertificateDer::pem_slice_iter(server.cert_pem.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .expect("the server certificate");
            let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(server.key_pem.as_bytes())
                .expect("the server key");
            let config = rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .expect("the TLS configuration");
            tokio_rustls::TlsAcceptor::from(Arc::new(config))
        };
        let fetches = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = fetches.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let (tls, jwks, discovery, counted) = (
                    tls.clone(),
                    jwks.clone(),
                    discovery.clone(),
                    counted.clone(),
                );
                tokio::spawn(async move {
                    let Ok(stream) = tls.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(move |req| {
                        let body = match req.uri().path() {
                            "/.well-known/openid-configuration" => Some(discovery.clone()),
                            "/jwks" => {
                                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                Some(jwks.clone())
                            }
                            _ => None,
                        };
                        let resp = match body {
                            Some(b) => Response::builder()
                                .header("content-type", "application/json")
                                .body(Full::new(Bytes::from(b))),
                            None => Response::builder()
                                .status(StatusCode::NOT_FOUND)
                                .body(Full::new(Bytes::new())),
                        };
                        async move { Ok::<_, Infallible>(resp.expect("a response")) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        OidcIssuer {
            url,
            ca_pem: ca.cert_pem(),
            key,
            fetches,
            task,
        }
    }

    /// The issuer URL (`iss`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The CA its HTTPS certificate chains to.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// How many times its JWKS was fetched.
    pub fn jwks_fetches(&self) -> usize {
        self.fetches.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// An ID token with these claims, signed ES256 with key `kid` (a `kid` other than
    /// [`KID`] names a key the issuer does not publish).
    ///
    /// # Panics
    ///
    /// When signing fails.
    pub fn token(&self, claims: &Value, kid: &str) -> String {
        let header =
            URL_SAFE_NO_PAD.encode(json!({ "alg": "ES256", "typ": "JWT", "kid": kid }).to_string());
        let payload = URL_SAFE_NO_PAD.encode(claims.to_string());
        let signed = format!("{header}.{payload}");
        let sig = self
            .key
            .sign(&ring::rand::SystemRandom::new(), signed.as_bytes())
            .expect("a signature");
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
    }
}
