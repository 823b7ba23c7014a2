//! What a relay's and an agent's configuration files share: the `parent` and `tls`
//! sections, node names, addresses, and how a file is read and refused.
//!
//! Files are parsed into raw serde structs with unknown fields refused, then checked in
//! one pass that reports every fault at once, each naming the file and the field. A
//! path the user named that does not exist is an error, never a silent default.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::DeserializeOwned;

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

/// Where the parent is and what its certificate must say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParentConfig {
    /// The parent's node name (checked against its certificate).
    pub name: String,
    /// The parent's QUIC address.
    pub address: SocketAddr,
}

/// Certificate files (PEM).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// This node's certificate chain.
    pub cert: PathBuf,
    /// This node's private key.
    pub key: PathBuf,
    /// The hierarchy's CA certificate.
    pub ca: PathBuf,
}

/// The `parent` section as written: the parent's node name and its `IP:PORT`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)] // the section's fields are documented on the struct
pub struct RawParent {
    pub name: String,
    pub address: String,
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
        addr("parent.address", &self.address, faults).map(|address| ParentConfig {
            name: self.name,
            address,
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
}

impl RawTls {
    /// The files, relative to `base` (the configuration file's directory).
    pub fn resolve(self, base: &Path) -> TlsFiles {
        TlsFiles {
            cert: base.join(self.cert),
            key: base.join(self.key),
            ca: base.join(self.ca),
        }
    }
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
