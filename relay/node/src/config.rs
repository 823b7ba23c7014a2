//! What a relay's and an agent's configuration files share: the `parent` section (with
//! its transport and proxy) and the `tls` section, node names, addresses, and how a file is read and refused.
//!
//! Files are parsed into raw serde structs with unknown fields refused, then checked in
//! one pass that reports every fault at once, each naming the file and the field. A
//! path the user named that does not exist is an error, never a silent default.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use strata_protocol::wire::{MAX_PROTOCOL_VERSION, MIN_PROTOCOL_VERSION, ProtocolVersion};

pub use crate::net::cert_files::TlsFiles;
use crate::net::dial::{Connector, ParentAddress, QUIC_PROBE_EVERY, TransportMode};
use crate::net::proxy::{Proxy, ProxyError};
use crate::net::tcp::KEEP_ALIVE;
use crate::net::tls::{Identity, client_config};
use crate::net::transport::client_endpoint;

/// Node names are DNS labels: they appear in certificates and in cluster paths.
pub use strata_topology::names::check_node_name;

/// Why a configuration file was refused. Every variant names the file (`path`).
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // each variant names the file (`path`)
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: cannot read the configuration file: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file is not valid YAML for this configuration.
    #[error("{path}: {detail}")]
    Parse {
        path: PathBuf,
        /// The parser's message, with line and column.
        detail: String,
    },
    /// The file parsed but some fields are wrong; every fault is listed.
    #[error("{path}: {}", Faults(.faults))]
    Invalid {
        path: PathBuf,
        /// Each fault: the field and what is wrong with it.
        faults: Vec<String>,
    },
}

struct Faults<'a>(&'a [String]);

impl fmt::Display for Faults<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join("; "))
    }
}

/// Reads `path` and parses it as `T` (unknown fields are refused by `T`).
pub fn read_yaml<T: DeserializeOwned>(path: &Path) -> Result<T, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    serde_saphyr::from_str(&text).map_err(|e| ConfigError::Parse {
        path: path.to_owned(),
        detail: e.to_string(),
    })
}

/// Where the parent is, what its certificate must say, and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParentConfig {
    /// The parent's node name (checked against its certificate, whatever the route).
    pub name: String,
    /// The parent's address: `IP:PORT`, or `host:port` resolved at every connect.
    pub address: ParentAddress,
    /// `auto | quic | tcp` (default `auto`).
    pub transport: TransportMode,
    /// The proxy for TLS/TCP links given in the file; `None`: `HTTPS_PROXY` /
    /// `NO_PROXY` decide (see [`ParentConfig::connector`]).
    pub proxy: Option<Proxy>,
    /// `auto`: how often QUIC is tried again while the link is on TCP.
    pub quic_probe_every: Duration,
    /// TLS/TCP: how often the child pings (shorter than the idle timeout of any proxy
    /// or balancer on the way).
    pub keep_alive: Duration,
}

/// Why the connector to the parent could not be set up.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // each variant carries its cause
pub enum ConnectorError {
    /// The TLS configuration is unusable.
    #[error(transparent)]
    Tls(#[from] crate::net::tls::TlsError),
    /// The QUIC endpoint could not be bound.
    #[error(transparent)]
    Transport(#[from] crate::net::transport::TransportError),
    /// `HTTPS_PROXY` holds an unusable proxy URL.
    #[error("HTTPS_PROXY: {0}")]
    Proxy(#[from] ProxyError),
}

impl ParentConfig {
    /// How to reach this parent with `identity`: a QUIC endpoint (unless `tcp`), TLS
    /// for TCP (unless `quic`), and the proxy: the file's `proxy:`, else the one
    /// `HTTPS_PROXY` names unless `NO_PROXY` exempts the parent's host.
    pub fn connector(&self, identity: &Identity) -> Result<Connector, ConnectorError> {
        self.connector_with(client_config(identity)?)
    }

    /// The connector of an agent joining this parent with a token: as
    /// [`ParentConfig::connector`] (transport, proxy), presenting no certificate and
    /// checking the parent's against the CA in `ca`.
    pub fn join_connector(&self, ca: &Path) -> Result<Connector, ConnectorError> {
        self.connector_with(crate::net::tls::join_client_config(ca)?)
    }

    fn connector_with(&self, tls: Arc<rustls::ClientConfig>) -> Result<Connector, ConnectorError> {
        let quic = match self.transport {
            TransportMode::Tcp => None,
            _ => {
                // Dual-stack where the host has IPv6, so that happy eyeballs can try
                // both families; IPv4 only otherwise.
                let v6: SocketAddr = SocketAddr::from(([0u16; 8], 0));
                match client_endpoint(v6, tls.clone()) {
                    Ok(e) => Some(e),
                    Err(_) => Some(client_endpoint(
                        SocketAddr::from(([0, 0, 0, 0], 0)),
                        tls.clone(),
                    )?),
                }
            }
        };
        let proxy = match (&self.proxy, self.transport) {
            (_, TransportMode::Quic) => None,
            (Some(p), _) => Some(p.clone()),
            (None, _) => Proxy::from_env(&self.address.host())?,
        };
        let tcp_tls = (self.transport != TransportMode::Quic).then_some(tls);
        let mut connector = Connector::new(self.transport, quic, tcp_tls, proxy);
        connector.probe_every = self.quic_probe_every;
        connector.keep_alive = self.keep_alive;
        Ok(connector)
    }
}

/// The `parent` section as written: the parent's node name, its `IP:PORT` or
/// `host:port`, and optionally `transport: auto | quic | tcp`, `proxy:
/// http://user:pass@host:port`, `quic_probe_ms` (how often `auto` tries QUIC again
/// while on TCP) and `keepalive_ms` (how often a TLS/TCP link pings).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)] // the section's fields are documented on the struct
pub struct RawParent {
    pub name: String,
    pub address: String,
    #[serde(default)]
    pub transport: Option<String>,
    #[serde(default)]
    pub proxy: Option<String>,
    #[serde(default)]
    pub quic_probe_ms: Option<u64>,
    #[serde(default)]
    pub keepalive_ms: Option<u64>,
}

impl RawParent {
    /// The section checked for node `child`, its faults added to `faults`.
    pub fn check(self, child: &str, faults: &mut Vec<String>) -> Option<ParentConfig> {
        if let Err(why) = check_node_name(&self.name) {
            faults.push(format!("parent.name: {why}"));
        }
        if self.name == child {
            faults.push("parent.name: a node cannot be its own parent".to_owned());
        }
        let transport = match self.transport.as_deref().map(str::parse::<TransportMode>) {
            None => TransportMode::default(),
            Some(Ok(t)) => t,
            Some(Err(why)) => {
                faults.push(format!("parent.transport: {why}"));
                TransportMode::default()
            }
        };
        let proxy = match self.proxy.as_deref().map(Proxy::parse) {
            None => None,
            Some(Ok(p)) => Some(p),
            Some(Err(e)) => {
                faults.push(format!("parent.proxy: {e}"));
                None
            }
        };
        if proxy.is_some() && transport == TransportMode::Quic {
            faults.push(
                "parent.proxy: a proxy carries TLS over TCP only: set `transport: tcp` or `auto`"
                    .to_owned(),
            );
        }
        let quic_probe_every = match self.quic_probe_ms {
            Some(0) => {
                faults.push("parent.quic_probe_ms: must be at least 1".to_owned());
                QUIC_PROBE_EVERY
            }
            Some(ms) => Duration::from_millis(ms),
            None => QUIC_PROBE_EVERY,
        };
        let keep_alive = match self.keepalive_ms {
            Some(ms) if ms < 100 => {
                faults.push(format!("parent.keepalive_ms: {ms} is below 100"));
                KEEP_ALIVE
            }
            Some(ms) => Duration::from_millis(ms),
            None => KEEP_ALIVE,
        };
        let address = match self.address.parse::<ParentAddress>() {
            Ok(a) => a,
            Err(why) => {
                faults.push(format!("parent.address: {why}"));
                return None;
            }
        };
        Some(ParentConfig {
            name: self.name,
            address,
            transport,
            proxy,
            quic_probe_every,
            keep_alive,
        })
    }
}

/// The `tls` section as written: certificate, key and CA files.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)] // the section's fields are documented on the struct
pub struct RawTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
    #[serde(default)]
    pub renew_at_percent: Option<u8>,
}

impl RawTls {
    /// The files, relative to `base` (the configuration file's directory); faults
    /// added to `faults`.
    pub fn resolve(self, base: &Path, faults: &mut Vec<String>) -> TlsFiles {
        let renew_at_percent = match self.renew_at_percent {
            Some(p @ 1..=99) => p,
            Some(p) => {
                faults.push(format!("tls.renew_at_percent: {p} is not between 1 and 99"));
                crate::net::cert_files::DEFAULT_RENEW_AT_PERCENT
            }
            None => crate::net::cert_files::DEFAULT_RENEW_AT_PERCENT,
        };
        TlsFiles {
            cert: base.join(self.cert),
            key: base.join(self.key),
            ca: base.join(self.ca),
            renew_at_percent,
        }
    }
}

/// The environment variable that narrows the protocol versions a node speaks (`relay
/// serve`, `agent run`): `MIN..=MAX`, or one version `V`. For tests of hierarchies of
/// mixed versions only (a binary given a range beyond its own claims versions it does
/// not implement); unset, a node speaks every version its build knows.
pub const PROTOCOL_VERSIONS_ENV: &str = "STRATA_PROTOCOL_VERSIONS";

/// The value of [`PROTOCOL_VERSIONS_ENV`] is not a range of versions.
#[derive(Debug, thiserror::Error)]
#[error("{PROTOCOL_VERSIONS_ENV}={value:?}: expected MIN..=MAX or one version, MIN <= MAX")]
pub struct ProtocolVersionsError {
    /// What the variable holds.
    pub value: String,
}

/// The protocol versions this process speaks, lowest and highest: the build's
/// whole range, or as [`PROTOCOL_VERSIONS_ENV`] narrows it.
pub fn protocol_versions() -> Result<(ProtocolVersion, ProtocolVersion), ProtocolVersionsError> {
    match std::env::var(PROTOCOL_VERSIONS_ENV) {
        Err(_) => Ok((MIN_PROTOCOL_VERSION, MAX_PROTOCOL_VERSION)),
        Ok(value) => parse_versions(&value).ok_or(ProtocolVersionsError { value }),
    }
}

fn parse_versions(value: &str) -> Option<(ProtocolVersion, ProtocolVersion)> {
    let (min, max) = value.split_once("..=").unwrap_or((value, value));
    let (min, max) = (min.trim().parse().ok()?, max.trim().parse().ok()?);
    (min <= max).then_some((min, max))
}

/// Parses `value` as `IP:PORT`, or adds a fault naming `field`.
pub fn addr(field: &str, value: &str, faults: &mut Vec<String>) -> Option<SocketAddr> {
    match value.parse() {
        Ok(a) => Some(a),
        Err(_) => {
            faults.push(format!(
                "{field}: {value:?} is not an address of the form IP:PORT"
            ));
            None
        }
    }
}

/// The field names of a configuration section's raw struct, as its `Deserialize`
/// declares them: what the configuration reference (`deploy/CONFIG.md`) must
/// name, checked by the crates' tests so that the reference cannot drift.
pub fn field_names<T: serde::de::DeserializeOwned>() -> &'static [&'static str] {
    match T::deserialize(FieldCatcher) {
        Err(Caught(Some(fields))) => fields,
        _ => &[],
    }
}

/// The fields of `sections` (a dotted prefix and the field names of its raw struct,
/// from [`field_names`]) that `reference` does not name as a table row
/// (`` | `path` | ``): what the configuration reference is missing.
pub fn undocumented_fields(reference: &str, sections: &[(&str, &[&str])]) -> Vec<String> {
    sections
        .iter()
        .flat_map(|(prefix, fields)| fields.iter().map(move |f| format!("{prefix}{f}")))
        .filter(|path| !reference.contains(&format!("| `{path}` |")))
        .collect()
}

/// The first YAML block after `heading` in `reference` (the section's example).
pub fn reference_example(reference: &str, heading: &str) -> Option<String> {
    let at = reference.find(heading)?;
    let heading_line = reference[..at].lines().count() + 1;
    fenced_blocks(reference)
        .into_iter()
        .find(|b| b.line > heading_line && b.lang == "yaml")
        .map(|b| b.text)
}

/// A fenced code block of a Markdown document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FencedBlock {
    /// The first word of the info string (`yaml`, `sh`; empty for none).
    pub lang: String,
    /// The line number (from 1) of the block's first line of content.
    pub line: usize,
    /// The line number of its closing fence.
    pub end: usize,
    /// The content, the fence's indentation removed from each line.
    pub text: String,
}

/// Every fenced code block (```` ``` ```` or `~~~`, possibly indented, as in a list) of
/// `doc`, in order: what the docs tests read examples and commands from, so that what
/// the documentation shows is checked against the code.
pub fn fenced_blocks(doc: &str) -> Vec<FencedBlock> {
    let mut blocks = Vec::new();
    // The open block's fence and indentation, and the block so far.
    let mut open: Option<(&str, usize, FencedBlock)> = None;
    for (i, line) in doc.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let fence = ["```", "~~~"].into_iter().find(|f| trimmed.starts_with(f));
        match open.take() {
            Some((f, _, block)) if fence == Some(f) && trimmed.trim_end() == f => {
                blocks.push(FencedBlock {
                    end: i + 1,
                    ..block
                });
            }
            Some((f, fence_indent, mut block)) => {
                if block.line <= i {
                    block.text.push('\n');
                }
                block.text.push_str(&line[indent.min(fence_indent)..]);
                open = Some((f, fence_indent, block));
            }
            None => {
                if let Some(f) = fence {
                    let lang = trimmed[f.len()..].split_whitespace().next().unwrap_or("");
                    let block = FencedBlock {
                        lang: lang.to_owned(),
                        line: i + 2,
                        end: 0,
                        text: String::new(),
                    };
                    open = Some((f, indent, block));
                }
            }
        }
    }
    blocks
}

/// A deserializer that answers nothing and records the fields a struct asks for.
struct FieldCatcher;

#[derive(Debug)]
struct Caught(Option<&'static [&'static str]>);

impl std::fmt::Display for Caught {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("field names caught")
    }
}

impl std::error::Error for Caught {}

impl serde::de::Error for Caught {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Caught(None)
    }
}

impl<'de> serde::Deserializer<'de> for FieldCatcher {
    type Error = Caught;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Caught> {
        Err(Caught(None))
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Caught> {
        Err(Caught(Some(fields)))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
        byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
        identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::{FencedBlock, fenced_blocks, parse_versions, reference_example};

    #[test]
    fn fenced_blocks_keep_their_language_lines_and_indentation() {
        let doc = "# A\n```yaml\na: 1\n```\n1. step\n   ```sh\n   relay up \\\n     x\n   ```\n~~~\n```\n~~~\n";
        let block = |lang: &str, line, end, text: &str| FencedBlock {
            lang: lang.to_owned(),
            line,
            end,
            text: text.to_owned(),
        };
        assert_eq!(
            fenced_blocks(doc),
            [
                block("yaml", 3, 4, "a: 1"),
                block("sh", 7, 9, "relay up \\\n  x"),
                block("", 11, 12, "```"),
            ]
        );
        assert_eq!(reference_example(doc, "# A").as_deref(), Some("a: 1"));
        assert_eq!(reference_example(doc, "1. step"), None);
    }

    #[test]
    fn a_range_or_one_version_narrows_the_protocol_versions() {
        assert_eq!(parse_versions("1..=2"), Some((1, 2)));
        assert_eq!(parse_versions("3"), Some((3, 3)));
        assert_eq!(parse_versions("2..=1"), None);
        assert_eq!(parse_versions("1-2"), None);
        assert_eq!(parse_versions(""), None);
    }
}
