//! Why issuing or writing a certificate fails ([`CertError`]), and the file reads and
//! writes that name their path in it (keys and tokens only their owner may read).

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::files::ConfinementError;

/// Why a certificate could not be issued or written.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// The node name cannot go into a certificate.
    #[error("cannot issue a certificate for {name:?}: {reason}")]
    BadName {
        /// The name.
        name: String,
        /// Why.
        reason: crate::names::NameError,
    },
    /// rcgen refused.
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A PEM file holds no usable CA certificate or key.
    #[error("{path}: {reason}")]
    BadFile {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A node would be given, or would reference, what it must not hold (the CA key,
    /// another node's file).
    #[error(transparent)]
    Confinement(#[from] ConfinementError),
    /// Going on would replace a key or the CA; `--force` allows it.
    #[error("{path}: {reason}; pass --force to replace it")]
    WouldReplace {
        /// The file.
        path: PathBuf,
        /// What would be replaced.
        reason: String,
    },
}

/// Writes a file, naming it in the error.
pub fn write(path: &Path, contents: &str) -> Result<(), CertError> {
    std::fs::write(path, contents).map_err(|source| CertError::Io {
        path: path.to_owned(),
        source,
    })
}

/// Writes a file only its owner may read (keys, tokens).
pub fn write_secret(path: &Path, contents: &str) -> Result<(), CertError> {
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| CertError::Io {
        path: path.to_owned(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(io)?;
    f.write_all(contents.as_bytes()).map_err(io)
}

pub(super) fn read(path: &Path) -> Result<String, CertError> {
    std::fs::read_to_string(path).map_err(|source| CertError::Io {
        path: path.to_owned(),
        source,
    })
}
