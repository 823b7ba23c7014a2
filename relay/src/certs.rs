//! Issuing the hierarchy's certificates with rcgen: one CA, and a certificate per node
//! that names it (as common name and DNS subject alternative name).

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

use crate::config::check_node_name;

/// Why a certificate could not be issued or written.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// The node name cannot go into a certificate.
    #[error("cannot issue a certificate for {name:?}: {reason}")]
    BadName {
        /// The name.
        name: String,
        /// Why.
        reason: String,
    },
    /// rcgen refused.
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),
    /// A file could not be written.
    #[error("{path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// A certificate authority able to issue node certificates.
pub struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").finish_non_exhaustive()
    }
}

/// A node's certificate and key, in PEM.
#[derive(Debug, Clone)]
pub struct NodeCert {
    /// The node's name.
    pub name: String,
    /// Certificate (PEM).
    pub cert_pem: String,
    /// Private key (PEM, PKCS#8).
    pub key_pem: String,
}

impl Ca {
    /// A new self-signed CA for the hierarchy `name`.
    pub fn generate(name: &str) -> Result<Ca, CertError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, format!("{name} strata CA"));
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        Ok(Ca { cert, key })
    }

    /// The CA certificate (PEM), which every node trusts.
    pub fn cert_pem(&self) -> String {
        self.cert.pem()
    }

    /// Issues a certificate naming `node`, usable to serve children and to connect to a
    /// parent.
    pub fn issue(&self, node: &str) -> Result<NodeCert, CertError> {
        check_node_name(node).map_err(|reason| CertError::BadName {
            name: node.to_owned(),
            reason,
        })?;
        let mut params = CertificateParams::new(vec![node.to_owned()])?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, node);
        params.distinguished_name = dn;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.cert, &self.key)?;
        Ok(NodeCert {
            name: node.to_owned(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

impl NodeCert {
    /// Writes `<name>.crt` and `<name>.key` into `dir`; returns their paths.
    pub fn write_to(&self, dir: &Path) -> Result<(PathBuf, PathBuf), CertError> {
        let cert = dir.join(format!("{}.crt", self.name));
        let key = dir.join(format!("{}.key", self.name));
        write(&cert, &self.cert_pem)?;
        write(&key, &self.key_pem)?;
        Ok((cert, key))
    }
}

/// Writes a file, naming it in the error.
pub fn write(path: &Path, contents: &str) -> Result<(), CertError> {
    std::fs::write(path, contents).map_err(|source| CertError::Write {
        path: path.to_owned(),
        source,
    })
}
