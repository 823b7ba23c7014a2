//! A Filesystem volume's bytes: a deterministic tar archive of its tree, and that
//! archive put back in place.
//!
//! The archive lists the tree in sorted order (each directory's entries by name,
//! depth first), and each entry's header holds only what the tree says (type, mode,
//! owner ids, mtime, size, link target): no user or group names, no access or change
//! times. So archiving the same tree twice gives the same bytes, and a tree in which
//! one file changed gives the same bytes up to that file: a move's second pass sends
//! the chunks from there on whose sums differ, not the whole volume. Sockets, FIFOs
//! and device nodes are left out (a volume's data does not live in them).
//!
//! The top-level [`MOVER_DIR`] (the mover's own working files on a writing side) is
//! never archived, pruned nor overwritten.

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The mover's working directory at the top of a Filesystem volume it writes.
pub const MOVER_DIR: &str = ".strata-mover";

/// What [`write_archive`] put in the archive.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Archived {
    /// Regular files.
    pub files: u64,
    /// Directories (the root not counted).
    pub dirs: u64,
    /// Symbolic links.
    pub links: u64,
    /// Entries left out (sockets, FIFOs, devices).
    pub skipped: u64,
}

/// Writes the archive of the tree at `root` to `out` (see the module doc).
pub fn write_archive<W: Write>(root: &Path, out: W) -> io::Result<Archived> {
    let mut builder = tar::Builder::new(out);
    builder.follow_symlinks(false);
    let mut archived = Archived::default();
    append_dir(&mut builder, root, Path::new(""), &mut archived)?;
    builder.into_inner()?.flush()?;
    Ok(archived)
}

fn append_dir<W: Write>(
    builder: &mut tar::Builder<W>,
    root: &Path,
    rel: &Path,
    archived: &mut Archived,
) -> io::Result<()> {
    for rel in entries(root, rel)? {
        let path = root.join(&rel);
        let meta = fs::symlink_metadata(&path).map_err(|e| at(&path, e))?;
        let kind = meta.file_type();
        let mut header = tar::Header::new_gnu();
        header.set_mode(meta.mode() & 0o7777);
        header.set_uid(u64::from(meta.uid()));
        header.set_gid(u64::from(meta.gid()));
        header.set_mtime(u64::try_from(meta.mtime()).unwrap_or(0));
        if kind.is_dir() {
            header.set_entry_type(tar::EntryType::Directory);
            header.set_size(0);
            builder
                .append_data(&mut header, &rel, io::empty())
                .map_err(|e| at(&path, e))?;
            archived.dirs += 1;
            append_dir(builder, root, &rel, archived)?;
        } else if kind.is_file() {
            header.set_entry_type(tar::EntryType::Regular);
            header.set_size(meta.len());
            let file = fs::File::open(&path).map_err(|e| at(&path, e))?;
            builder
                .append_data(&mut header, &rel, file)
                .map_err(|e| at(&path, e))?;
            archived.files += 1;
        } else if kind.is_symlink() {
            header.set_entry_type(tar::EntryType::Symlink);
            header.set_size(0);
            let target = fs::read_link(&path).map_err(|e| at(&path, e))?;
            builder
                .append_link(&mut header, &rel, &target)
                .map_err(|e| at(&path, e))?;
            archived.links += 1;
        } else {
            tracing::warn!(path = %path.display(), "left out of the volume's archive: not a file, directory or symbolic link");
            archived.skipped += 1;
        }
    }
    Ok(())
}

/// Puts the archive at `image` in place under `root`: whatever `root` holds that the
/// archive does not (or holds as another kind: a file where the archive has a
/// directory) is removed first, except [`MOVER_DIR`]; then every entry is written with
/// its mode, owner and mtime (owners kept only when run as root, as tar does;
/// directories' mtimes set last, deepest first, since writing into a directory
/// changes its mtime).
/// Returns how many entries the archive has.
pub fn extract_archive(image: &Path, root: &Path) -> io::Result<usize> {
    // The archive's paths and whether each is a directory.
    let mut wanted: BTreeSet<(PathBuf, bool)> = BTreeSet::new();
    // Directories' mtimes, which tar's unpack does not set.
    let mut dir_times: Vec<(PathBuf, u64)> = Vec::new();
    let mut archive = tar::Archive::new(fs::File::open(image).map_err(|e| at(image, e))?);
    for entry in archive.entries().map_err(|e| at(image, e))? {
        let entry = entry.map_err(|e| at(image, e))?;
        let path = normalize(&entry.path().map_err(|e| at(image, e))?);
        let dir = entry.header().entry_type().is_dir();
        if dir {
            dir_times.push((path.clone(), entry.header().mtime().unwrap_or(0)));
        }
        wanted.insert((path, dir));
    }
    prune(root, Path::new(""), &wanted)?;
    let mut archive = tar::Archive::new(fs::File::open(image).map_err(|e| at(image, e))?);
    archive.set_overwrite(true);
    archive.set_preserve_permissions(true);
    archive.set_preserve_mtime(true);
    archive.set_preserve_ownerships(running_as_root());
    archive.unpack(root).map_err(|e| at(root, e))?;
    // Deepest first: setting a directory's time does not change its parent's.
    dir_times.sort_by(|a, b| b.0.cmp(&a.0));
    for (rel, mtime) in dir_times {
        let path = root.join(rel);
        let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(mtime);
        fs::File::open(&path)
            .and_then(|d| d.set_modified(when))
            .map_err(|e| at(&path, e))?;
    }
    Ok(wanted.len())
}

/// `a/./b/` as `a/b` (tar paths may carry a trailing slash for directories).
fn normalize(path: &Path) -> PathBuf {
    path.components()
        .filter(|c| !matches!(c, std::path::Component::CurDir))
        .collect()
}

/// The entries of the directory `rel` below `root`, sorted, as paths relative to `root`,
/// the mover's own directory left out.
fn entries(root: &Path, rel: &Path) -> io::Result<Vec<PathBuf>> {
    let dir = root.join(rel);
    let mut names: Vec<_> = fs::read_dir(&dir)
        .map_err(|e| at(&dir, e))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()
        .map_err(|e| at(&dir, e))?;
    names.sort();
    Ok(names
        .into_iter()
        .map(|name| rel.join(name))
        .filter(|rel| rel != Path::new(MOVER_DIR))
        .collect())
}

fn prune(root: &Path, rel: &Path, wanted: &BTreeSet<(PathBuf, bool)>) -> io::Result<()> {
    for rel in entries(root, rel)? {
        let path = root.join(&rel);
        let is_dir = fs::symlink_metadata(&path)
            .map_err(|e| at(&path, e))?
            .file_type()
            .is_dir();
        if !wanted.contains(&(rel.clone(), is_dir)) {
            if is_dir {
                fs::remove_dir_all(&path).map_err(|e| at(&path, e))?;
            } else {
                fs::remove_file(&path).map_err(|e| at(&path, e))?;
            }
        } else if is_dir {
            prune(root, &rel, wanted)?;
        }
    }
    Ok(())
}

/// Whether this process may give files to other owners (it owns `/proc/self`'s uid 0).
fn running_as_root() -> bool {
    fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

fn at(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn tree(root: &Path) {
        fs::create_dir_all(root.join("b/deep")).unwrap();
        fs::write(root.join("a.txt"), b"alpha").unwrap();
        fs::write(root.join("b/deep/c.bin"), vec![7u8; 3000]).unwrap();
        std::os::unix::fs::symlink("a.txt", root.join("link")).unwrap();
        // Directories written long ago: extracting must keep their times.
        let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
        for d in ["b/deep", "b"] {
            fs::File::open(root.join(d))
                .unwrap()
                .set_modified(old)
                .unwrap();
        }
    }

    fn image_of(root: &Path) -> Vec<u8> {
        let mut out = Vec::new();
        write_archive(root, &mut out).unwrap();
        out
    }

    #[test]
    fn the_same_tree_gives_the_same_bytes_and_the_mover_dir_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        tree(dir.path());
        let first = image_of(dir.path());
        fs::create_dir(dir.path().join(MOVER_DIR)).unwrap();
        fs::write(dir.path().join(MOVER_DIR).join("image"), b"x").unwrap();
        assert_eq!(first, image_of(dir.path()));
    }

    #[test]
    fn extracting_makes_the_tree_equal_and_removes_what_the_source_lacks() {
        let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        tree(src.path());
        // The destination holds stale things, a file where the source has a directory,
        // and the mover's own directory.
        fs::write(dst.path().join("stale"), b"old").unwrap();
        fs::write(dst.path().join("b"), b"a file, not a directory").unwrap();
        fs::create_dir(dst.path().join(MOVER_DIR)).unwrap();
        let image = dst.path().join(MOVER_DIR).join("image");
        fs::write(&image, image_of(src.path())).unwrap();
        assert_eq!(extract_archive(&image, dst.path()).unwrap(), 5);
        assert!(!dst.path().join("stale").exists());
        assert!(image.exists());
        assert_eq!(image_of(src.path()), image_of(dst.path()));
    }
}
