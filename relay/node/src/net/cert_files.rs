//! This node's certificate files: where they are ([`TlsFiles`]) and what a renewal
//! replaces ([`RenewConfig`]), writing a renewed key and certificate durably
//! ([`write_files`]) and finishing or undoing a renewal a crash interrupted
//! ([`settle_files`]), and whether a certificate has expired ([`expired_at`]). Renewing
//! itself is the node's (`crate::renew`).

use std::io::Write;
use std::path::{Path, PathBuf};

/// Certificate files (PEM).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// This node's certificate chain.
    pub cert: PathBuf,
    /// This node's private key.
    pub key: PathBuf,
    /// The hierarchy's CA certificate, or several (a trust bundle, while the CA is
    /// rotated).
    pub ca: PathBuf,
    /// When in its certificate's lifetime the node renews it through its parent, in
    /// percent (`tls.renew_at_percent`, default
    /// [`DEFAULT_RENEW_AT_PERCENT`]).
    pub renew_at_percent: u8,
}

impl TlsFiles {
    /// What the driver renews (see [`crate::renew`]) for node `node`.
    pub fn renewal(&self, node: &str) -> RenewConfig {
        RenewConfig {
            node: node.to_owned(),
            files: self.clone(),
            at_percent: self.renew_at_percent,
        }
    }
}

/// By default a certificate is renewed once this share (percent) of its lifetime has
/// passed.
pub const DEFAULT_RENEW_AT_PERCENT: u8 = 67;

/// What a node renews: its files, its name, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenewConfig {
    /// The node's name (what the new certificate must name).
    pub node: String,
    /// Its certificate, key and trusted CA files.
    pub files: TlsFiles,
    /// When in the certificate's lifetime to renew, in percent (1 to 99).
    pub at_percent: u8,
}

/// The `.new` file beside `path` a renewal writes before renaming.
fn staged(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".new");
    PathBuf::from(name)
}

fn write_synced(path: &Path, contents: &str, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)?;
    f.write_all(contents.as_bytes())?;
    f.sync_all()
}

fn sync_dir(path: &Path) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)?.sync_all()
}

/// Replaces the key and certificate durably: both written to `.new` files and synced,
/// then the key renamed into place, then the certificate, then the directories synced.
/// A crash at any point leaves either the old pair, or the new key with a staged
/// certificate that [`settle_files`] moves into place at the next start.
pub fn write_files(cert: &Path, key: &Path, chain_pem: &str, key_pem: &str) -> std::io::Result<()> {
    let (cert_new, key_new) = (staged(cert), staged(key));
    write_synced(&key_new, key_pem, 0o600)?;
    write_synced(&cert_new, chain_pem, 0o644)?;
    std::fs::rename(&key_new, key)?;
    sync_dir(key)?;
    std::fs::rename(&cert_new, cert)?;
    sync_dir(cert)
}

/// Finishes or undoes a renewal that a crash interrupted in [`write_files`]: a staged
/// certificate without a staged key means the key was already renamed, so the
/// certificate follows; a staged key means nothing was renamed yet, so both staged
/// files go and the old pair stays.
pub fn settle_files(cert: &Path, key: &Path) -> std::io::Result<()> {
    let (cert_new, key_new) = (staged(cert), staged(key));
    if key_new.exists() {
        std::fs::remove_file(&key_new)?;
        if cert_new.exists() {
            std::fs::remove_file(&cert_new)?;
        }
        return Ok(());
    }
    if cert_new.exists() {
        std::fs::rename(&cert_new, cert)?;
        sync_dir(cert)?;
        tracing::warn!(cert = %cert.display(), "finished a certificate renewal interrupted by a crash");
    }
    Ok(())
}

/// Whether the certificate (chain) in `cert` has expired (its leaf's `notAfter` is
/// past) by the system's clock; `false` when it cannot be read.
pub fn expired(cert: &Path) -> bool {
    expired_at(cert, strata_topology::certs::unix_now())
}

/// Whether the certificate (chain) in `cert` has expired at `now` (Unix seconds, the
/// node's clock); `false` when it cannot be read.
pub fn expired_at(cert: &Path, now: i64) -> bool {
    std::fs::read_to_string(cert)
        .ok()
        .and_then(|pem| strata_topology::certs::pem_not_after(&pem))
        .is_some_and(|t| t <= now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interrupted_renewal_is_finished_or_undone() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("n.crt"), dir.path().join("n.key"));
        std::fs::write(&cert, "old cert").unwrap();
        std::fs::write(&key, "old key").unwrap();
        // Crash before any rename: the old pair stays.
        std::fs::write(staged(&key), "new key").unwrap();
        std::fs::write(staged(&cert), "new cert").unwrap();
        settle_files(&cert, &key).unwrap();
        assert_eq!(std::fs::read_to_string(&cert).unwrap(), "old cert");
        assert_eq!(std::fs::read_to_string(&key).unwrap(), "old key");
        assert!(!staged(&cert).exists() && !staged(&key).exists());
        // Crash between the renames: the certificate follows the key.
        std::fs::write(&key, "new key").unwrap();
        std::fs::write(staged(&cert), "new cert").unwrap();
        settle_files(&cert, &key).unwrap();
        assert_eq!(std::fs::read_to_string(&cert).unwrap(), "new cert");
        // A whole write.
        write_files(&cert, &key, "newer cert", "newer key").unwrap();
        assert_eq!(std::fs::read_to_string(&cert).unwrap(), "newer cert");
        assert_eq!(std::fs::read_to_string(&key).unwrap(), "newer key");
        assert!(!staged(&cert).exists() && !staged(&key).exists());
    }
}
