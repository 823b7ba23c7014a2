//! One volume mounted at a path, as a [`VolumeStore`]: what a mover pod reads or writes.
//!
//! * `volumeMode: Block` (a device or a file): the bytes are the volume. Written in
//!   place; a file takes the source's length at the end, a device keeps its own (its
//!   sums are compared over the source's length).
//! * `volumeMode: Filesystem` (a directory): the volume's bytes are the archive of its
//!   tree ([`super::archive`]). A reading mover writes the archive into its scratch
//!   directory (the pod's `emptyDir`: as large as the volume's data) and serves its
//!   chunks. A writing mover keeps the image it receives at
//!   `<mount>/.strata-mover/image`, so a later pass (the second phase of a move, or
//!   a pass after a cut link) finds the sums it holds and is sent only the chunks that
//!   differ; once a pass ends with every sum equal to the source's, the image is
//!   extracted over the mount. **Space:** the destination claim holds the data twice
//!   (the tree and its image), so it must be at least twice as large as the data.

use std::fs::File;
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use strata_node::volume::checksum;
use strata_protocol::placement_spec::VolumeClaim;
use strata_protocol::volume::{CHUNK_SIZE, ChunkSum, MAX_VOLUME_BYTES};
use tokio::sync::Mutex;

use super::archive::{self, MOVER_DIR};
use crate::volume::VolumeStore;

/// How the volume is mounted (its claim's `spec.volumeMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum VolumeMode {
    /// A directory: the volume's bytes are the archive of its tree.
    Filesystem,
    /// A block device (or a file standing for one): the bytes are the volume.
    Block,
}

/// Why a mounted volume refused an operation.
#[derive(Debug, thiserror::Error)]
pub enum MountedError {
    /// A file operation failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// On what.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// A mover cannot stop the volume's writers (its agent scales them).
    #[error(
        "a mover pod cannot stop or let again the volume's writers: the agent that started it does"
    )]
    NoFreeze,
    /// The volume is larger than a move copies.
    #[error("{path}: {size} bytes, over the {MAX_VOLUME_BYTES} a move copies")]
    TooLarge {
        /// The volume.
        path: PathBuf,
        /// Its size.
        size: u64,
    },
    /// A blocking task could not finish.
    #[error("the mover's file task ended: {0}")]
    Task(String),
}

/// One volume mounted at a path (cheap to share: clone the [`std::sync::Arc`] it is
/// put in).
#[derive(Debug)]
pub struct MountedVolume {
    mode: VolumeMode,
    path: PathBuf,
    scratch: PathBuf,
    /// The image being read: a Filesystem volume's archive, made at the first
    /// manifest of a read stream and kept until the next (a temporary file).
    reading: Mutex<Option<std::sync::Arc<tempfile::NamedTempFile>>>,
}

impl MountedVolume {
    /// The volume at `path`, mounted as `mode`; a reading mover writes a Filesystem
    /// volume's archive under `scratch`.
    pub fn new(mode: VolumeMode, path: PathBuf, scratch: PathBuf) -> Self {
        MountedVolume {
            mode,
            path,
            scratch,
            reading: Mutex::new(None),
        }
    }

    /// The file whose bytes a writing mover writes: the device, or the image kept
    /// in the mount.
    fn write_image(&self) -> PathBuf {
        match self.mode {
            VolumeMode::Block => self.path.clone(),
            VolumeMode::Filesystem => self.path.join(MOVER_DIR).join("image"),
        }
    }

    /// The file whose bytes a reading mover serves.
    async fn read_image(&self) -> Result<PathBuf, MountedError> {
        if self.mode == VolumeMode::Block {
            return Ok(self.path.clone());
        }
        let held = self.reading.lock().await.clone();
        match held {
            Some(f) => Ok(f.path().to_owned()),
            None => {
                let f = self.archive_now().await?;
                Ok(f.path().to_owned())
            }
        }
    }

    /// Archives the tree into a new scratch file (replacing the one held).
    async fn archive_now(&self) -> Result<std::sync::Arc<tempfile::NamedTempFile>, MountedError> {
        let (root, scratch) = (self.path.clone(), self.scratch.clone());
        let file = blocking(move || {
            let io = |what, path: &Path| {
                let path = path.to_owned();
                move |source| MountedError::Io { what, path, source }
            };
            let mut file = tempfile::Builder::new()
                .prefix("strata-mover-")
                .suffix(".tar")
                .tempfile_in(&scratch)
                .map_err(io("creating a scratch file in", &scratch))?;
            let archived = archive::write_archive(&root, io::BufWriter::new(file.as_file_mut()))
                .map_err(io("archiving", &root))?;
            tracing::info!(path = %root.display(), files = archived.files, dirs = archived.dirs, links = archived.links, skipped = archived.skipped, "archived the volume's tree");
            Ok(file)
        })
        .await?;
        let file = std::sync::Arc::new(file);
        *self.reading.lock().await = Some(file.clone());
        Ok(file)
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, MountedError> + Send + 'static,
) -> Result<T, MountedError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| MountedError::Task(e.to_string()))?
}

fn io_err(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> MountedError {
    let path = path.to_owned();
    move |source| MountedError::Io { what, path, source }
}

/// The length of a file or block device (a device's metadata says 0: seek to its end).
fn length(file: &mut File, path: &Path) -> Result<u64, MountedError> {
    let size = file
        .seek(SeekFrom::End(0))
        .map_err(io_err("sizing", path))?;
    if size > MAX_VOLUME_BYTES {
        return Err(MountedError::TooLarge {
            path: path.to_owned(),
            size,
        });
    }
    Ok(size)
}

fn read_chunk(file: &File, path: &Path, size: u64, index: u32) -> Result<Vec<u8>, MountedError> {
    let start = u64::from(index) * CHUNK_SIZE as u64;
    let len = usize::try_from(size.saturating_sub(start).min(CHUNK_SIZE as u64)).unwrap_or(0);
    let mut data = vec![0; len];
    file.read_exact_at(&mut data, start)
        .map_err(io_err("reading", path))?;
    Ok(data)
}

/// The sums of the first `size` bytes of `file`.
fn sums_of(file: &File, path: &Path, size: u64) -> Result<Vec<ChunkSum>, MountedError> {
    let n = strata_protocol::volume::chunk_count(size);
    (0..n)
        .map(|i| {
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            read_chunk(file, path, size, i).map(|d| checksum(&d))
        })
        .collect()
}

/// The size and sums of the file at `path` (created empty if `create`).
fn manifest_of(path: &Path, create: bool) -> Result<(u64, Vec<ChunkSum>), MountedError> {
    if create && let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io_err("creating", dir))?;
    }
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(create)
        .create(create)
        .truncate(false)
        .open(path)
        .map_err(io_err("opening", path))?;
    let size = length(&mut file, path)?;
    Ok((size, sums_of(&file, path, size)?))
}

impl VolumeStore for MountedVolume {
    type Error = MountedError;

    async fn freeze(&self, _: &VolumeClaim, _: bool) -> Result<(), MountedError> {
        Err(MountedError::NoFreeze)
    }

    async fn manifest(&self, _: &VolumeClaim) -> Result<(u64, Vec<ChunkSum>), MountedError> {
        // Every read stream archives the tree anew: a pass sees the tree as it is now.
        if self.mode == VolumeMode::Filesystem {
            self.archive_now().await?;
        }
        let path = self.read_image().await?;
        blocking(move || manifest_of(&path, false)).await
    }

    async fn chunk(
        &self,
        _: &VolumeClaim,
        index: u32,
    ) -> Result<Option<(Vec<u8>, ChunkSum)>, MountedError> {
        let path = self.read_image().await?;
        blocking(move || {
            let mut file = File::open(&path).map_err(io_err("opening", &path))?;
            let size = length(&mut file, &path)?;
            if u64::from(index) * CHUNK_SIZE as u64 >= size {
                return Ok(None);
            }
            let data = read_chunk(&file, &path, size, index)?;
            let sum = checksum(&data);
            Ok(Some((data, sum)))
        })
        .await
    }

    async fn begin_restore(&self, _: &VolumeClaim) -> Result<(u64, Vec<ChunkSum>), MountedError> {
        let path = self.write_image();
        blocking(move || manifest_of(&path, true)).await
    }

    async fn begin_replica(
        &self,
        claim: &VolumeClaim,
    ) -> Result<(u64, Vec<ChunkSum>), MountedError> {
        // Whether the claim's app writes here is the agent's to know (it only
        // replicates onto a cluster where the claim is a replica).
        self.begin_restore(claim).await
    }

    async fn restore_chunk(
        &self,
        _: &VolumeClaim,
        index: u32,
        data: Vec<u8>,
    ) -> Result<(), MountedError> {
        let path = self.write_image();
        blocking(move || {
            let start = u64::from(index) * CHUNK_SIZE as u64;
            let end = start + data.len() as u64;
            if end > MAX_VOLUME_BYTES {
                return Err(MountedError::TooLarge { path, size: end });
            }
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(io_err("opening", &path))?;
            file.write_all_at(&data, start)
                .map_err(io_err("writing", &path))
        })
        .await
    }

    async fn end_restore(
        &self,
        _: &VolumeClaim,
        size: u64,
        sums: &[ChunkSum],
        _replica: bool,
    ) -> Result<usize, MountedError> {
        let (path, mode, root) = (self.write_image(), self.mode, self.path.clone());
        let sums = sums.to_vec();
        blocking(move || {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .map_err(io_err("opening", &path))?;
            if file.metadata().is_ok_and(|m| m.is_file()) {
                file.set_len(size).map_err(io_err("sizing", &path))?;
            }
            file.sync_all().map_err(io_err("syncing", &path))?;
            let held = sums_of(&file, &path, size)?;
            let differ = held.iter().zip(&sums).filter(|(a, b)| a != b).count()
                + held.len().abs_diff(sums.len());
            if differ == 0 && mode == VolumeMode::Filesystem {
                let entries =
                    archive::extract_archive(&path, &root).map_err(io_err("extracting", &path))?;
                tracing::info!(path = %root.display(), entries, "the volume's tree is in place");
            }
            Ok(differ)
        })
        .await
    }

    async fn abandon_restore(&self, _: &VolumeClaim) {
        // The image keeps what it got: the next pass is sent only what it lacks.
    }
}
