//! The certificate the root's user API serves: the root's name and the names and
//! addresses clients reach the API by (`spec.root.api.names`, the listen IP,
//! `localhost` on loopback), for serving only. It lives in the root's own directory
//! (`api.crt`, `api.key`, and `api.names`, the names it was issued for).

use std::path::{Path, PathBuf};

use rcgen::{ExtendedKeyUsagePurpose, KeyPair, KeyUsagePurpose};

use super::io::{CertError, read, write, write_secret};
use super::{Action, Ca, named, refuse_ca_key, valid_for};
use crate::files::{self, Holder};
use crate::{Addr, Relay, Topology};

impl Ca {
    /// Issues the certificate of the root's user API: it names `sans` (the root's name
    /// first), for serving only.
    pub(super) fn issue_api_for_key(
        &self,
        root: &str,
        sans: &[String],
        key: &KeyPair,
    ) -> Result<String, CertError> {
        let mut params = named(root, format!("{root} API"), sans.to_vec())?;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        valid_for(&mut params, self.lifetimes.node_days);
        let cert = params.signed_by(key, &self.cert, &self.key)?;
        Ok(format!("{}{}", cert.pem(), self.chain))
    }
}

/// The names the root's API certificate carries: the root's name (what clients that
/// set `tls-server-name` check), the topology's `api.names`, the listen IP unless it is
/// a wildcard, and `localhost` and `127.0.0.1` when it listens on loopback.
pub fn api_sans(root: &Relay) -> Vec<String> {
    let mut out = vec![root.name.clone()];
    out.extend(root.api_names.iter().cloned());
    let ip = match root.api {
        Some(Addr::Fixed(a)) => Some(a.ip()),
        Some(Addr::Auto(ip)) => Some(ip),
        None => None,
    };
    if let Some(ip) = ip.filter(|ip| !ip.is_unspecified()) {
        out.push(ip.to_string());
        if ip.is_loopback() {
            out.extend(["localhost".to_owned(), "127.0.0.1".to_owned()]);
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    out.retain(|n| seen.insert(n.clone()));
    out
}

/// The root's API certificate and key: kept while the names it carries are the same;
/// issued again for the same key when they change (a key is replaced only with
/// `force`); both new when there is no key.
pub(super) fn api_pair(
    ca: &Ca,
    topology: &Topology,
    dir: &Path,
    force: bool,
) -> Result<Vec<(PathBuf, Action)>, CertError> {
    let root = topology.root();
    let (cert, key, names) = (
        files::api_cert(dir, &root.name),
        files::api_key(dir, &root.name),
        files::api_names(dir, &root.name),
    );
    files::check_reference(dir, &root.name, "api.cert", &cert, Holder::Node)?;
    files::check_reference(dir, &root.name, "api.key", &key, Holder::Node)?;
    let sans = api_sans(root);
    let listed = format!("{}\n", sans.join("\n"));
    let same = std::fs::read_to_string(&names).is_ok_and(|n| n == listed);
    let mut done = Vec::new();
    if same && cert.exists() && key.exists() && !force {
        done.push((cert, Action::Kept));
        return Ok(done);
    }
    if key.exists() && !force {
        let pair = KeyPair::from_pem(&read(&key)?).map_err(|e| CertError::BadFile {
            path: key.clone(),
            reason: e.to_string(),
        })?;
        let action = if cert.exists() {
            Action::Replaced
        } else {
            Action::Created
        };
        write(&cert, &ca.issue_api_for_key(&root.name, &sans, &pair)?)?;
        done.push((cert, action));
    } else {
        let action = if key.exists() {
            Action::Replaced
        } else {
            Action::Created
        };
        let pair = KeyPair::generate()?;
        write(&cert, &ca.issue_api_for_key(&root.name, &sans, &pair)?)?;
        write_secret(&key, &pair.serialize_pem())?;
        done.push((cert, action));
        done.push((key.clone(), action));
    }
    refuse_ca_key(ca, &root.name, "api.key", &key)?;
    // Bookkeeping, not reported: what the certificate was issued for.
    write(&names, &listed)?;
    Ok(done)
}
