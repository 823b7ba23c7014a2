//! Two movers on loopback, one reading a temporary tree and one writing another, pumped
//! as the lowest common relay of a move pumps them.

use std::fs;
use std::path::Path;

use strata_node::volume::{PumpOutcome, Side, VolumeError, checksum, held, pump, read_frame};
use strata_protocol::placement_spec::VolumeClaim;
use strata_protocol::volume::CHUNK_SIZE;
use tokio::sync::oneshot;

use super::archive::{MOVER_DIR, write_archive};
use super::*;

const TOKEN: &str = "s3cret";

fn claim() -> VolumeClaim {
    VolumeClaim {
        claim: "data".into(),
        namespace: "shop".into(),
    }
}

fn route(cluster: &str) -> TunnelOpen {
    TunnelOpen {
        cluster: cluster.into(),
        request: 1,
        user: "test".into(),
    }
}

/// A mover serving `path`; stops when the sender is dropped.
struct Running {
    addr: SocketAddr,
    _stop: oneshot::Sender<()>,
    _scratch: tempfile::TempDir,
}

async fn mover(mode: VolumeMode, path: &Path) -> Running {
    let scratch = tempfile::tempdir().unwrap();
    let args = MoverArgs {
        listen: "127.0.0.1:0".parse().unwrap(),
        path: path.to_owned(),
        mode,
        token_file: None,
        scratch: Some(scratch.path().to_owned()),
    };
    let (listener, volume) = args.bind().await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(serve(listener, volume, TOKEN.into(), async move {
        let _ = stopped.await;
    }));
    Running {
        addr,
        _stop: stop,
        _scratch: scratch,
    }
}

async fn side(m: &Running, cluster: &str, ask: VolumeOpen) -> Side<TcpStream> {
    let stream = connect(m.addr, TOKEN, &route(cluster), &ask).await.unwrap();
    Side {
        cluster: cluster.into(),
        stream,
    }
}

/// One pass from `src` to `dst`, as a relay runs it.
async fn pass(src: &Running, dst: &Running) -> Result<PumpOutcome, VolumeError> {
    let mut w = side(dst, "new", VolumeOpen::Write { claim: claim() }).await;
    let have = held(&mut w).await?;
    let ask = VolumeOpen::Read {
        claim: claim(),
        skip: have.clone(),
        freeze: false,
    };
    let mut r = side(src, "old", ask).await;
    pump(&mut r, &mut w, &have).await
}

fn image_of(root: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    write_archive(root, &mut out).unwrap();
    out
}

/// A tree of about 2 MiB: many files, then one large one at the end (sorted last).
fn tree(root: &Path) {
    for i in 0..8 {
        let data: Vec<u8> = (0..200_000u32)
            .map(|b| (b.wrapping_mul(i + 3) >> 3) as u8)
            .collect();
        fs::write(root.join(format!("f{i}.bin")), data).unwrap();
    }
    fs::create_dir_all(root.join("sub/dir")).unwrap();
    fs::write(root.join("sub/dir/note.txt"), b"hello volume").unwrap();
    std::os::unix::fs::symlink("../f0.bin", root.join("sub/link")).unwrap();
    fs::write(root.join("zz-last.log"), vec![1u8; 300_000]).unwrap();
}

#[tokio::test]
async fn a_tree_is_written_elsewhere_then_a_change_sends_few_chunks() {
    let (src_dir, dst_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    tree(src_dir.path());
    // Something the source does not have, which the copy removes.
    fs::write(dst_dir.path().join("stale.txt"), b"old").unwrap();
    let src = mover(VolumeMode::Filesystem, src_dir.path()).await;
    let dst = mover(VolumeMode::Filesystem, dst_dir.path()).await;

    let first = pass(&src, &dst).await.unwrap();
    assert_eq!(first.sent, first.chunks, "{first:?}");
    assert!(first.chunks >= 8, "{first:?}");
    assert_eq!(image_of(src_dir.path()), image_of(dst_dir.path()));
    assert_eq!(
        fs::read(dst_dir.path().join("sub/dir/note.txt")).unwrap(),
        b"hello volume"
    );
    assert_eq!(
        fs::read_link(dst_dir.path().join("sub/link")).unwrap(),
        Path::new("../f0.bin")
    );
    assert!(!dst_dir.path().join("stale.txt").exists());
    assert!(dst_dir.path().join(MOVER_DIR).join("image").exists());

    // The app changes the last file (same size): the second pass sends only the
    // chunks from that file on.
    fs::write(src_dir.path().join("zz-last.log"), vec![2u8; 300_000]).unwrap();
    let second = pass(&src, &dst).await.unwrap();
    assert!(second.sent <= 3, "{second:?}");
    assert!(second.skipped >= second.chunks - 3, "{second:?}");
    assert_eq!(image_of(src_dir.path()), image_of(dst_dir.path()));

    // Nothing changed: nothing is sent.
    let third = pass(&src, &dst).await.unwrap();
    assert_eq!(third.sent, 0, "{third:?}");
}

#[tokio::test]
async fn a_block_volume_is_copied_byte_for_byte_and_takes_the_source_length() {
    let dir = tempfile::tempdir().unwrap();
    let (src_file, dst_file) = (dir.path().join("src.img"), dir.path().join("dst.img"));
    let data: Vec<u8> = (0..(3 * CHUNK_SIZE + 77))
        .map(|i| (i % 251) as u8)
        .collect();
    fs::write(&src_file, &data).unwrap();
    fs::write(&dst_file, vec![9u8; 5 * CHUNK_SIZE]).unwrap();
    let src = mover(VolumeMode::Block, &src_file).await;
    let dst = mover(VolumeMode::Block, &dst_file).await;
    let out = pass(&src, &dst).await.unwrap();
    assert_eq!((out.chunks, out.sent), (4, 4));
    assert_eq!(fs::read(&dst_file).unwrap(), data);
}

#[tokio::test]
async fn a_chunk_that_does_not_match_its_sum_is_refused_and_nothing_is_extracted() {
    let dst_dir = tempfile::tempdir().unwrap();
    fs::write(dst_dir.path().join("kept.txt"), b"mine").unwrap();
    let dst = mover(VolumeMode::Filesystem, dst_dir.path()).await;
    let mut w = side(&dst, "new", VolumeOpen::Write { claim: claim() }).await;
    held(&mut w).await.unwrap();
    let mut buf = Vec::new();
    let bad = VolumeFrame::chunk(0, checksum(b"what was read"), b"what arrived".to_vec());
    write_frame(&mut w.stream, &bad, &mut buf).await.unwrap();
    match read_frame(&mut w.stream, &mut buf).await.unwrap() {
        Some(VolumeFrame::Failed { reason }) => {
            assert!(reason.contains("does not match its checksum"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(fs::read(dst_dir.path().join("kept.txt")).unwrap(), b"mine");
    let image = fs::read(dst_dir.path().join(MOVER_DIR).join("image")).unwrap();
    assert!(image.is_empty());
}

#[tokio::test]
async fn a_connection_without_the_token_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let m = mover(VolumeMode::Filesystem, dir.path()).await;
    let ask = VolumeOpen::Write { claim: claim() };
    let mut conn = connect(m.addr, "wrong", &route("new"), &ask).await.unwrap();
    match read_frame(&mut conn, &mut Vec::new()).await.unwrap() {
        Some(VolumeFrame::Failed { reason }) => {
            assert!(reason.contains("not the mover's token"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // And a freeze is the agent's to do, not the mover's.
    let ask = VolumeOpen::Read {
        claim: claim(),
        skip: Vec::new(),
        freeze: true,
    };
    let mut conn = connect(m.addr, TOKEN, &route("old"), &ask).await.unwrap();
    match read_frame(&mut conn, &mut Vec::new()).await.unwrap() {
        Some(VolumeFrame::Failed { reason }) => {
            assert!(reason.contains("the agent stops the writers"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_path_that_does_not_fit_the_mode_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let args = MoverArgs {
        listen: "127.0.0.1:0".parse().unwrap(),
        path: dir.path().to_owned(),
        mode: VolumeMode::Block,
        token_file: None,
        scratch: None,
    };
    let err = args.bind().await.unwrap_err().to_string();
    assert!(err.contains("a directory (use --mode filesystem)"), "{err}");
}
