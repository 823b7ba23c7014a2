//! The harness's NATS client: the TLS material every server and client shares, a
//! connection (INFO, optional TLS upgrade, CONNECT), and a subscriber standing in for
//! each leaf. A minimal text-protocol client: the harness needs a handful of subjects.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::super::BenchError;
use super::super::tree::Applied;
use super::{Flavor, SUBJECT, err};

/// The TLS baseline's material: one CA, and one certificate (for 127.0.0.1) that every
/// server and client presents and checks its peer's against.
pub(crate) struct Tls {
    pub(super) ca: PathBuf,
    pub(super) cert: PathBuf,
    pub(super) key: PathBuf,
    client: Arc<rustls::ClientConfig>,
}

impl Tls {
    /// Issues the material into `dir`.
    pub(super) fn issue(dir: &Path) -> Result<Tls, BenchError> {
        use rcgen::{
            BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, KeyPair, SanType,
        };
        let ca_key = KeyPair::generate().map_err(err)?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).map_err(err)?;
        let key = KeyPair::generate().map_err(err)?;
        let mut params = CertificateParams::new(vec!["localhost".to_owned()]).map_err(err)?;
        params
            .subject_alt_names
            .push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = params.signed_by(&key, &ca, &ca_key).map_err(err)?;
        let tls = Tls {
            ca: dir.join("ca.pem"),
            cert: dir.join("node.pem"),
            key: dir.join("node.key"),
            client: {
                let mut roots = rustls::RootCertStore::empty();
                roots.add(ca.der().clone()).map_err(err)?;
                let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
                let config = rustls::ClientConfig::builder_with_provider(Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))
                .with_safe_default_protocol_versions()
                .map_err(err)?
                .with_root_certificates(roots)
                .with_client_auth_cert(vec![cert.der().clone()], key_der)
                .map_err(err)?;
                Arc::new(config)
            },
        };
        std::fs::write(&tls.ca, ca.pem()).map_err(err)?;
        std::fs::write(&tls.cert, cert.pem()).map_err(err)?;
        std::fs::write(&tls.key, key.serialize_pem()).map_err(err)?;
        Ok(tls)
    }
}

/// A connection after the handshake.
pub(super) struct Conn {
    pub(super) reader: BufReader<Box<dyn AsyncRead + Send + Unpin>>,
    pub(super) writer: Box<dyn AsyncWrite + Send + Unpin>,
}

/// Reads the server's INFO line byte by byte, so nothing after it is consumed before a
/// TLS upgrade.
async fn read_info(s: &mut TcpStream, addr: SocketAddr) -> Result<(), BenchError> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while line.last() != Some(&b'\n') {
        if line.len() > 64 * 1024 || s.read(&mut byte).await.map_err(err)? == 0 {
            return Err(err(format!("{addr} sent no INFO line")));
        }
        line.push(byte[0]);
    }
    if !line.starts_with(b"INFO") {
        let line = String::from_utf8_lossy(&line);
        return Err(err(format!("{addr} greeted with {line:?}")));
    }
    Ok(())
}

pub(super) async fn connect(addr: SocketAddr, tls: Option<&Tls>) -> Result<Conn, BenchError> {
    let mut last = String::new();
    for _ in 0..200 {
        match TcpStream::connect(addr).await {
            Ok(mut s) => {
                s.set_nodelay(true).map_err(err)?;
                read_info(&mut s, addr).await?;
                let (r, w): (
                    Box<dyn AsyncRead + Send + Unpin>,
                    Box<dyn AsyncWrite + Send + Unpin>,
                ) = match tls {
                    None => {
                        let (r, w) = s.into_split();
                        (Box::new(r), Box::new(w))
                    }
                    Some(tls) => {
                        let name = ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
                        let stream = tokio_rustls::TlsConnector::from(tls.client.clone())
                            .connect(name, s)
                            .await
                            .map_err(|e| err(format!("TLS to {addr}: {e}")))?;
                        let (r, w) = tokio::io::split(stream);
                        (Box::new(r), Box::new(w))
                    }
                };
                let mut conn = Conn {
                    reader: BufReader::new(r),
                    writer: w,
                };
                conn.writer
                    .write_all(b"CONNECT {\"verbose\":false,\"pedantic\":false,\"lang\":\"strata-bench\",\"version\":\"0\",\"protocol\":1}\r\n")
                    .await
                    .map_err(err)?;
                return Ok(conn);
            }
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(err(format!("cannot connect to {addr}: {last}")))
}

impl Conn {
    /// Sends PING and reads until PONG: everything sent before is processed.
    pub(super) async fn flush(&mut self) -> Result<(), BenchError> {
        self.writer.write_all(b"PING\r\n").await.map_err(err)?;
        self.read_until("PONG").await.map(drop)
    }

    /// Reads lines until one starting with `want`, and returns it. Answers the server's
    /// own PINGs on the way (its keep-alive: a client that leaves two of them unanswered
    /// is dropped as a "Stale Connection", after about 4 minutes at the defaults, which a
    /// 10,000-subscriber set-up outlasts); an `-ERR` fails.
    pub(super) async fn read_until(&mut self, want: &str) -> Result<String, BenchError> {
        let mut line = String::new();
        for _ in 0..1000 {
            line.clear();
            if self.reader.read_line(&mut line).await.map_err(err)? == 0 {
                return Err(err("connection closed"));
            }
            if line.starts_with(want) {
                return Ok(line);
            }
            if line.starts_with("PING") {
                self.writer.write_all(b"PONG\r\n").await.map_err(err)?;
            } else if line.starts_with("-ERR") {
                return Err(err(line.trim()));
            }
        }
        Err(err(format!("no {want} from the server")))
    }
}

/// What a leaf's subscriber hears: the payload's sequence number (its first 8 bytes) as
/// it arrives, and under JetStream when the server confirmed the leaf's acknowledgement
/// of it.
pub(super) struct Heard {
    /// Deliveries.
    pub(super) delivered: mpsc::UnboundedSender<Applied>,
    /// Acknowledgements the server confirmed (JetStream only).
    pub(super) acked: mpsc::UnboundedSender<Applied>,
}

/// The subject leaf `leaf`'s durable consumer delivers to (JetStream).
pub(super) fn deliver_subject(leaf: u32) -> String {
    format!("deliver.leaf{leaf}")
}

/// A subscriber standing in for leaf `leaf`. Core NATS: it subscribes to the payload's
/// subject. JetStream: to its durable consumer's delivery subject, and it acknowledges
/// every message with a reply subject of its own, so that the server confirms the
/// acknowledgement once the consumer recorded it (what `AckSync` does in the official
/// clients), as our agents' statuses are counted once the relay holds them.
pub(super) async fn subscribe(
    addr: SocketAddr,
    tls: Option<&Tls>,
    leaf: u32,
    flavor: Flavor,
    heard: Heard,
) -> Result<tokio::task::JoinHandle<()>, BenchError> {
    let mut conn = connect(addr, tls).await?;
    let subs = match flavor {
        Flavor::Core => format!("SUB {SUBJECT} 1\r\n"),
        Flavor::JetStream => format!(
            "SUB {} 1\r\nSUB {} 2\r\n",
            deliver_subject(leaf),
            ack_inbox(leaf)
        ),
    };
    conn.writer.write_all(subs.as_bytes()).await.map_err(err)?;
    conn.flush().await?;
    Ok(tokio::spawn(async move {
        let Conn {
            mut reader,
            mut writer,
        } = conn;
        let mut line = String::new();
        let mut payload = Vec::new();
        // Sequence numbers acknowledged, oldest first: the server confirms each
        // consumer's acknowledgements in the order they came.
        let mut unconfirmed = std::collections::VecDeque::new();
        loop {
            line.clear();
            match reader.read_line(&mut line).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line.starts_with("MSG") {
                // MSG <subject> <sid> [reply-to] <#bytes>
                let parts: Vec<&str> = line.split_whitespace().collect();
                let size: usize = parts.last().and_then(|s| s.parse().ok()).unwrap_or(0);
                payload.resize(size + 2, 0);
                if reader.read_exact(&mut payload).await.is_err() {
                    return;
                }
                let at = Instant::now();
                if parts.get(2) == Some(&"2") {
                    if let Some(revision) = unconfirmed.pop_front() {
                        let _ = heard.acked.send(Applied { leaf, revision, at });
                    }
                    continue;
                }
                let mut seq = [0u8; 8];
                let n = size.min(8);
                seq[..n].copy_from_slice(&payload[..n]);
                let revision = u64::from_le_bytes(seq);
                let _ = heard.delivered.send(Applied { leaf, revision, at });
                if let (Flavor::JetStream, 5) = (flavor, parts.len()) {
                    let ack = format!("PUB {} {} 0\r\n\r\n", parts[3], ack_inbox(leaf));
                    if writer.write_all(ack.as_bytes()).await.is_err() {
                        return;
                    }
                    unconfirmed.push_back(revision);
                }
            } else if line.starts_with("PING") && writer.write_all(b"PONG\r\n").await.is_err() {
                return;
            }
        }
    }))
}

/// Where the server confirms leaf `leaf`'s acknowledgements.
fn ack_inbox(leaf: u32) -> String {
    format!("_INBOX.ack{leaf}")
}
