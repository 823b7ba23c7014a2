//! The simulated cluster's volume bytes: a PersistentVolumeClaim applied to a simulated
//! cluster gets a byte store of its requested size (`spec.resources.requests.storage`,
//! capped at [`MAX_SIM_VOLUME`]), in chunks of [`CHUNK_SIZE`] held only once written
//! (an unwritten chunk reads as zeros), each with its checksum kept beside it. Tests
//! write and read it through the simulated API (`/strata/volumes/NS/CLAIM`, see
//! [`crate::sim_volumes_api`]) or this handle; a move's volume streams read and write it
//! (`crate::volume`).
//!
//! A claim is *frozen* once a move's second phase stopped its writers (writes refused,
//! as a real workload scaled to zero), *restoring* while a move writes it (writes
//! by anyone else refused), and a *replica* once a ReadWriteMany sync wrote it
//! (writes refused: across clusters only the primary writes) until a move's copy
//! promotes it.

use std::collections::BTreeMap;
use std::sync::Arc;

use strata_node::volume::checksum;
use strata_protocol::placement_spec::VolumeClaim;
use strata_protocol::volume::{CHUNK_SIZE, ChunkSum, MAX_VOLUME_BYTES, chunk_count};
use tokio::sync::{Mutex, watch};

/// The largest simulated volume.
pub const MAX_SIM_VOLUME: u64 = 4 << 30;

/// Why a simulated volume refused an access.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VolumeAccessError {
    /// No claim of that name was applied (and no move restored one).
    #[error("no PersistentVolumeClaim {0} on this cluster")]
    NoClaim(String),
    /// A move stopped the claim's writers.
    #[error("claim {0} is read-only: a move stopped its writers")]
    Frozen(String),
    /// A move is restoring the claim.
    #[error("claim {0} is being restored by a move")]
    Restoring(String),
    /// The claim is a read-only replica of a ReadWriteMany claim written elsewhere.
    #[error(
        "claim {0} is a read-only replica: across clusters only its primary cluster writes a ReadWriteMany claim"
    )]
    Replica(String),
    /// A replica sync into a claim its own app writes here (a primary).
    #[error(
        "claim {0} is written by its app on this cluster (a primary copy): a replica sync would overwrite it, so it is refused"
    )]
    Primary(String),
    /// The cluster was told to refuse restores (a fault for tests).
    #[error("claim {0}: this simulated cluster refuses restores (a fault set by a test)")]
    Refused(String),
    /// Out of the claim's size.
    #[error("claim {claim}: bytes {offset}..{end} lie beyond its {size} bytes")]
    Beyond {
        /// The claim.
        claim: String,
        /// Where the access started.
        offset: u64,
        /// Where it ended.
        end: u64,
        /// The claim's size.
        size: u64,
    },
}

#[derive(Debug, Default)]
struct SimVolume {
    size: u64,
    /// By index; `None` reads as zeros.
    chunks: Vec<Option<Arc<Vec<u8>>>>,
    sums: Vec<ChunkSum>,
    frozen: bool,
    restoring: bool,
    replica: bool,
    /// Its app wrote it since it was last restored.
    app_written: bool,
}

impl SimVolume {
    fn chunk_len(&self, index: usize) -> usize {
        let start = index as u64 * CHUNK_SIZE as u64;
        usize::try_from(self.size.saturating_sub(start).min(CHUNK_SIZE as u64)).unwrap_or(0)
    }

    /// Sets the size: chunks beyond it go, new ones read as zeros.
    fn resize(&mut self, size: u64) {
        self.size = size;
        let n = usize::try_from(chunk_count(size)).unwrap_or(0);
        self.chunks.truncate(n);
        self.chunks.resize(n, None);
        self.sums.truncate(n);
        while self.sums.len() < n {
            let len = self.chunk_len(self.sums.len());
            self.sums.push(zero_sum(len));
        }
        // The last chunk may have become shorter or longer: its sum is recomputed.
        if let Some(last) = n.checked_sub(1) {
            let data = self.read_chunk(last);
            self.sums[last] = checksum(&data);
            if self.chunks[last].is_some() {
                self.chunks[last] = Some(Arc::new(data));
            }
        }
    }

    fn read_chunk(&self, index: usize) -> Vec<u8> {
        let len = self.chunk_len(index);
        match self.chunks.get(index).cloned().flatten() {
            Some(c) => {
                let mut v = c.as_ref().clone();
                v.resize(len, 0);
                v
            }
            None => vec![0; len],
        }
    }

    fn put_chunk(&mut self, index: usize, data: Vec<u8>) {
        self.sums[index] = checksum(&data);
        self.chunks[index] = Some(Arc::new(data));
    }
}

/// The sum of `len` zero bytes (full chunks: computed once).
fn zero_sum(len: usize) -> ChunkSum {
    static FULL: std::sync::OnceLock<ChunkSum> = std::sync::OnceLock::new();
    if len == CHUNK_SIZE {
        *FULL.get_or_init(|| checksum(&vec![0; CHUNK_SIZE]))
    } else {
        checksum(&vec![0; len])
    }
}

/// A simulated cluster's volumes (cheap to clone: one store).
#[derive(Debug, Clone)]
pub struct SimVolumes {
    inner: Arc<Mutex<BTreeMap<VolumeClaim, SimVolume>>>,
    /// How many more restores may begin (negative: any number); a fault for tests.
    restores_left: Arc<std::sync::atomic::AtomicI64>,
    /// The claims applied to the cluster and their requested sizes.
    declared: watch::Receiver<BTreeMap<VolumeClaim, u64>>,
}

/// Where the simulated cluster says which claims it holds.
#[derive(Debug)]
pub struct ClaimBoard(watch::Sender<BTreeMap<VolumeClaim, u64>>);

impl Default for ClaimBoard {
    fn default() -> Self {
        ClaimBoard(watch::channel(BTreeMap::new()).0)
    }
}

impl ClaimBoard {
    /// A claim of `size` bytes was applied.
    pub fn declare(&self, claim: VolumeClaim, size: u64) {
        self.0.send_modify(|m| {
            m.insert(claim, size.min(MAX_SIM_VOLUME));
        });
    }

    /// The volumes behind the claims (one store per board).
    fn volumes(&self, store: &Arc<Mutex<BTreeMap<VolumeClaim, SimVolume>>>) -> SimVolumes {
        SimVolumes {
            inner: store.clone(),
            restores_left: Arc::new(std::sync::atomic::AtomicI64::new(-1)),
            declared: self.0.subscribe(),
        }
    }
}

/// A new, empty store of volumes, and the board its cluster declares claims on.
pub fn new_store() -> (ClaimBoard, SimVolumes) {
    let board = ClaimBoard::default();
    let volumes = board.volumes(&Arc::new(Mutex::new(BTreeMap::new())));
    (board, volumes)
}

/// The size a claim's manifest asks for (`spec.resources.requests.storage`: `1Gi`,
/// `512Mi`, `10G`, `1000`), capped at [`MAX_SIM_VOLUME`]; 1 GiB when absent or not
/// understood.
pub fn requested_size(claim: &serde_json::Value) -> u64 {
    let q = claim
        .pointer("/spec/resources/requests/storage")
        .and_then(|v| {
            v.as_str()
                .map(str::to_owned)
                .or_else(|| v.as_u64().map(|n| n.to_string()))
        })
        .unwrap_or_default();
    let units: [(&str, u64); 8] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("k", 1000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
    ];
    let (digits, unit) = units
        .iter()
        .find_map(|(suffix, mult)| q.strip_suffix(suffix).map(|d| (d, *mult)))
        .unwrap_or((q.as_str(), 1));
    digits
        .parse::<u64>()
        .ok()
        .map_or(1 << 30, |n| n.saturating_mul(unit))
        .min(MAX_SIM_VOLUME)
}

fn name(claim: &VolumeClaim) -> String {
    strata_node::volume::claim_name(claim)
}

impl SimVolumes {
    /// Runs `f` on the claim's volume, created from its declaration on first use.
    async fn with<T>(
        &self,
        claim: &VolumeClaim,
        create: bool,
        f: impl FnOnce(&mut SimVolume) -> Result<T, VolumeAccessError>,
    ) -> Result<T, VolumeAccessError> {
        let mut all = self.inner.lock().await;
        if !all.contains_key(claim) {
            let declared = self.declared.borrow().get(claim).copied();
            match declared {
                Some(size) => {
                    let mut v = SimVolume::default();
                    v.resize(size);
                    all.insert(claim.clone(), v);
                }
                None if create => {
                    all.insert(claim.clone(), SimVolume::default());
                }
                None => return Err(VolumeAccessError::NoClaim(name(claim))),
            }
        }
        match all.get_mut(claim) {
            Some(v) => f(v),
            None => Err(VolumeAccessError::NoClaim(name(claim))),
        }
    }

    /// Writes `data` at `offset`, as the claim's workload would.
    pub async fn write(
        &self,
        claim: &VolumeClaim,
        offset: u64,
        data: &[u8],
    ) -> Result<(), VolumeAccessError> {
        self.with(claim, false, |v| {
            if v.frozen {
                return Err(VolumeAccessError::Frozen(name(claim)));
            }
            if v.restoring {
                return Err(VolumeAccessError::Restoring(name(claim)));
            }
            if v.replica {
                return Err(VolumeAccessError::Replica(name(claim)));
            }
            let end = offset.saturating_add(data.len() as u64);
            if end > v.size {
                return Err(VolumeAccessError::Beyond {
                    claim: name(claim),
                    offset,
                    end,
                    size: v.size,
                });
            }
            let mut at = offset;
            let mut rest = data;
            while !rest.is_empty() {
                let index = usize::try_from(at / CHUNK_SIZE as u64).unwrap_or(usize::MAX);
                let within = usize::try_from(at % CHUNK_SIZE as u64).unwrap_or(0);
                let n = rest.len().min(v.chunk_len(index) - within);
                let mut chunk = v.read_chunk(index);
                chunk[within..within + n].copy_from_slice(&rest[..n]);
                v.put_chunk(index, chunk);
                rest = &rest[n..];
                at += n as u64;
            }
            v.app_written = true;
            Ok(())
        })
        .await
    }

    /// Reads `len` bytes at `offset` (at most to the end).
    pub async fn read(
        &self,
        claim: &VolumeClaim,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, VolumeAccessError> {
        self.with(claim, false, |v| {
            let end = offset.saturating_add(len).min(v.size);
            let mut out =
                Vec::with_capacity(usize::try_from(end.saturating_sub(offset)).unwrap_or(0));
            let mut at = offset;
            while at < end {
                let index = usize::try_from(at / CHUNK_SIZE as u64).unwrap_or(usize::MAX);
                let within = usize::try_from(at % CHUNK_SIZE as u64).unwrap_or(0);
                let chunk = v.read_chunk(index);
                let n = (chunk.len() - within).min(usize::try_from(end - at).unwrap_or(usize::MAX));
                out.extend_from_slice(&chunk[within..within + n]);
                at += n as u64;
            }
            Ok(out)
        })
        .await
    }

    /// The claim's size and chunk sums.
    pub async fn manifest(
        &self,
        claim: &VolumeClaim,
    ) -> Result<(u64, Vec<ChunkSum>), VolumeAccessError> {
        self.with(claim, false, |v| Ok((v.size, v.sums.clone())))
            .await
    }

    /// One chunk's bytes and sum, read together.
    pub async fn chunk(
        &self,
        claim: &VolumeClaim,
        index: u32,
    ) -> Result<Option<(Vec<u8>, ChunkSum)>, VolumeAccessError> {
        self.with(claim, false, |v| {
            let i = index as usize;
            Ok((i < v.sums.len()).then(|| (v.read_chunk(i), v.sums[i])))
        })
        .await
    }

    /// SHA-256 of the claim's whole content, and its size (what a test compares).
    pub async fn digest(&self, claim: &VolumeClaim) -> Result<(u64, String), VolumeAccessError> {
        self.with(claim, false, |v| {
            let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
            for i in 0..v.sums.len() {
                ctx.update(&v.read_chunk(i));
            }
            let hex: String = ctx
                .finish()
                .as_ref()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            Ok((v.size, hex))
        })
        .await
    }

    /// Stops (or lets again) the claim's writers.
    pub async fn freeze(&self, claim: &VolumeClaim, frozen: bool) -> Result<(), VolumeAccessError> {
        self.with(claim, false, |v| {
            v.frozen = frozen;
            Ok(())
        })
        .await
    }

    /// Whether the claim's writers are stopped.
    pub async fn frozen(&self, claim: &VolumeClaim) -> Result<bool, VolumeAccessError> {
        self.with(claim, false, |v| Ok(v.frozen)).await
    }

    /// A move starts writing the claim (creating it if no claim was applied yet: the
    /// new cluster gets the claim's manifest after its data); returns the sums held.
    pub async fn begin_restore(
        &self,
        claim: &VolumeClaim,
    ) -> Result<(u64, Vec<ChunkSum>), VolumeAccessError> {
        self.begin(claim, false).await
    }

    /// A ReadWriteMany sync starts writing the claim as a replica: as
    /// [`SimVolumes::begin_restore`], but refused if the claim is one its own app writes
    /// here (a primary: written, neither a replica nor stopped), so that a sync never
    /// overwrites a writer's data.
    pub async fn begin_replica(
        &self,
        claim: &VolumeClaim,
    ) -> Result<(u64, Vec<ChunkSum>), VolumeAccessError> {
        self.begin(claim, true).await
    }

    async fn begin(
        &self,
        claim: &VolumeClaim,
        replica: bool,
    ) -> Result<(u64, Vec<ChunkSum>), VolumeAccessError> {
        use std::sync::atomic::Ordering;
        let left = self.restores_left.load(Ordering::Relaxed);
        if left == 0 {
            return Err(VolumeAccessError::Refused(name(claim)));
        }
        if left > 0 {
            self.restores_left.fetch_sub(1, Ordering::Relaxed);
        }
        self.with(claim, true, |v| {
            if replica && v.app_written && !v.frozen && !v.replica {
                return Err(VolumeAccessError::Primary(name(claim)));
            }
            v.restoring = true;
            Ok((v.size, v.sums.clone()))
        })
        .await
    }

    /// A move writes chunk `index` (growing the claim if it must).
    pub async fn restore_chunk(
        &self,
        claim: &VolumeClaim,
        index: u32,
        data: Vec<u8>,
    ) -> Result<(), VolumeAccessError> {
        self.with(claim, true, |v| {
            let start = u64::from(index) * CHUNK_SIZE as u64;
            let end = start + data.len() as u64;
            if end > MAX_VOLUME_BYTES.min(MAX_SIM_VOLUME) {
                return Err(VolumeAccessError::Beyond {
                    claim: name(claim),
                    offset: start,
                    end,
                    size: MAX_SIM_VOLUME,
                });
            }
            if end > v.size {
                v.resize(end);
            }
            v.put_chunk(index as usize, data);
            Ok(())
        })
        .await
    }

    /// Whether the claim is a read-only replica.
    pub async fn is_replica(&self, claim: &VolumeClaim) -> Result<bool, VolumeAccessError> {
        self.with(claim, false, |v| Ok(v.replica)).await
    }

    /// A move's copy ended: the claim takes the source's size; returns how many chunks
    /// differ from `sums` (0: an exact copy). The claim is no longer restoring, nor
    /// stopped; it is a read-only replica if `replica` (a ReadWriteMany sync), else the
    /// copy that runs (a move's copy, which promotes a replica).
    pub async fn end_restore(
        &self,
        claim: &VolumeClaim,
        size: u64,
        sums: &[ChunkSum],
        replica: bool,
    ) -> Result<usize, VolumeAccessError> {
        self.with(claim, true, |v| {
            v.resize(size);
            v.restoring = false;
            v.replica = replica;
            v.app_written = false;
            // A restored claim is the copy that runs from now on: if it was stopped
            // by an earlier move away, its writers may write again.
            v.frozen = false;
            Ok(v.sums.iter().zip(sums).filter(|(a, b)| a != b).count()
                + v.sums.len().abs_diff(sums.len()))
        })
        .await
    }

    /// A fault for tests: after `n` more restores begin, every further one is refused
    /// (so a move's second phase can be made to fail after its first).
    pub fn refuse_restores_after(&self, n: i64) {
        self.restores_left
            .store(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// A move's write stream broke: the claim keeps what it got, and is not restoring.
    pub async fn abandon_restore(&self, claim: &VolumeClaim) {
        let _ = self
            .with(claim, true, |v| {
                v.restoring = false;
                Ok(())
            })
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim() -> VolumeClaim {
        VolumeClaim {
            claim: "data".into(),
            namespace: "shop".into(),
        }
    }

    #[tokio::test]
    async fn bytes_written_read_back_across_chunks_and_sums_follow() {
        let (board, vols) = new_store();
        board.declare(claim(), 3 * CHUNK_SIZE as u64 - 10);
        let (_, zero) = vols.manifest(&claim()).await.unwrap();
        let data: Vec<u8> = (0..CHUNK_SIZE + 100).map(|i| (i % 251) as u8).collect();
        vols.write(&claim(), 50, &data).await.unwrap();
        assert_eq!(
            vols.read(&claim(), 50, data.len() as u64).await.unwrap(),
            data
        );
        let (size, sums) = vols.manifest(&claim()).await.unwrap();
        assert_eq!(size, 3 * CHUNK_SIZE as u64 - 10);
        assert_ne!(sums[0], zero[0]);
        assert_ne!(sums[1], zero[1]);
        assert_eq!(sums[2], zero[2]);
        let err = vols.write(&claim(), size - 1, b"xy").await.unwrap_err();
        assert!(matches!(err, VolumeAccessError::Beyond { .. }), "{err}");
        vols.freeze(&claim(), true).await.unwrap();
        assert_eq!(
            vols.write(&claim(), 0, b"x").await,
            Err(VolumeAccessError::Frozen("shop/data".into()))
        );
    }

    #[tokio::test]
    async fn a_restore_grows_the_claim_and_ends_exact() {
        let (_, src) = new_store();
        let (_, dst) = new_store();
        src.begin_restore(&claim()).await.unwrap();
        src.restore_chunk(&claim(), 1, vec![7; 1000]).await.unwrap();
        src.end_restore(&claim(), CHUNK_SIZE as u64 + 1000, &[], false)
            .await
            .unwrap();
        let (size, sums) = src.manifest(&claim()).await.unwrap();
        let (_, held) = dst.begin_restore(&claim()).await.unwrap();
        assert!(held.is_empty());
        for i in 0..sums.len() as u32 {
            let (data, sum) = src.chunk(&claim(), i).await.unwrap().unwrap();
            assert_eq!(checksum(&data), sum);
            dst.restore_chunk(&claim(), i, data).await.unwrap();
        }
        assert_eq!(dst.end_restore(&claim(), size, &sums, true).await, Ok(0));
        assert_eq!(
            src.digest(&claim()).await.unwrap(),
            dst.digest(&claim()).await.unwrap()
        );
        // A replica refuses its app's writes until a move's copy promotes it.
        assert_eq!(
            dst.write(&claim(), 0, b"x").await,
            Err(VolumeAccessError::Replica("shop/data".into()))
        );
        dst.begin_replica(&claim()).await.unwrap();
        dst.end_restore(&claim(), size, &sums, true).await.unwrap();
        dst.begin_restore(&claim()).await.unwrap();
        dst.end_restore(&claim(), size, &sums, false).await.unwrap();
        assert_eq!(dst.is_replica(&claim()).await, Ok(false));
        dst.write(&claim(), 0, b"x").await.unwrap();
        // Now its app writes it: a replica sync is refused, until its writers stop.
        assert_eq!(
            dst.begin_replica(&claim()).await,
            Err(VolumeAccessError::Primary("shop/data".into()))
        );
        dst.freeze(&claim(), true).await.unwrap();
        dst.begin_replica(&claim()).await.unwrap();
    }

    #[test]
    fn sizes_are_read_from_the_claim() {
        let size = |s: serde_json::Value| {
            requested_size(
                &serde_json::json!({"spec": {"resources": {"requests": {"storage": s}}}}),
            )
        };
        assert_eq!(size("8Mi".into()), 8 << 20);
        assert_eq!(size("1G".into()), 1_000_000_000);
        assert_eq!(size(4096.into()), 4096);
        assert_eq!(size("100Ti".into()), MAX_SIM_VOLUME);
    }
}
