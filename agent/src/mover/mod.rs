//! The mover: `agent mover`, the process a mover pod runs to read or write one volume
//! for a move of a real cluster's claim (issue 50), and the agent's side of its
//! connection ([`connect`]).
//!
//! The agent that drives the cluster stops the claim's writers, takes a CSI
//! VolumeSnapshot, and starts a mover pod on a claim made from it (reading) or on the
//! new claim (writing); it then connects to the pod and splices the volume stream it
//! got from its parent onto the connection. So the mover speaks exactly the volume
//! stream of [`strata_node::volume`], preceded by two things the agent sends:
//!
//! 1. the mover's token and a newline (the pod's `STRATA_MOVER_TOKEN` or
//!    `--token-file`): a connection whose first line is not the token is answered with
//!    a [`VolumeFrame::Failed`] saying so, and closed;
//! 2. the stream's header as the agent received it (a framed [`StreamOpen::Volume`]):
//!    [`VolumeOpen::Read`] (without `freeze`: the agent stops writers),
//!    [`VolumeOpen::Write`] or [`VolumeOpen::Replicate`].
//!
//! One stream is served at a time (a second connection waits for the first), so two
//! passes never write the image at once.
//!
//! # Layout
//!
//! * [`archive`]: a Filesystem volume's bytes (a deterministic tar of its tree) and
//!   their extraction.
//! * [`store`]: the mounted volume as a [`crate::volume::VolumeStore`].

pub mod archive;
pub mod store;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use strata_node::volume::{FRAME_TIMEOUT, write_frame};
use strata_protocol::codec::FRAME_HEADER_LEN;
use strata_protocol::tunnel::TunnelOpen;
use strata_protocol::volume::{
    MAX_STREAM_HEADER, StreamOpen, VolumeFrame, VolumeOpen, decode_stream_open,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;
use tokio::task::JoinSet;

use self::store::{MountedVolume, VolumeMode};

/// The environment variable a mover reads its token from.
pub const TOKEN_ENV: &str = "STRATA_MOVER_TOKEN";

/// The longest token line a mover reads.
const MAX_TOKEN_LINE: u64 = 4096;

/// `agent mover`: serve one mounted volume to the agent that started this pod.
#[derive(Debug, Clone, clap::Args)]
pub struct MoverArgs {
    /// The address to listen on (the pod's port).
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:7700")]
    pub listen: SocketAddr,
    /// Where the volume is mounted: a directory (filesystem) or a device (block).
    #[arg(long, value_name = "PATH")]
    pub path: PathBuf,
    /// How the volume is mounted (its claim's `spec.volumeMode`).
    #[arg(long, value_enum, default_value = "filesystem")]
    pub mode: VolumeMode,
    /// A file whose first line is the token (else `STRATA_MOVER_TOKEN`).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Where a reading mover writes a Filesystem volume's archive (as large as the
    /// volume's data; default: the system's temporary directory).
    #[arg(long, value_name = "DIR")]
    pub scratch: Option<PathBuf>,
}

/// Why the mover could not start.
#[derive(Debug, thiserror::Error)]
pub enum MoverError {
    /// No token was given.
    #[error("the mover needs a token: set {TOKEN_ENV} or pass --token-file FILE")]
    NoToken,
    /// The token file could not be read.
    #[error("--token-file {path}: {source}")]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The volume's path is not what `--mode` says.
    #[error("--path {path}: {detail}")]
    Path {
        /// The path.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

impl MoverArgs {
    /// The token: the first line of `--token-file`, else `STRATA_MOVER_TOKEN`.
    pub fn token(&self) -> Result<String, MoverError> {
        let token = match &self.token_file {
            Some(path) => std::fs::read_to_string(path)
                .map_err(|source| MoverError::TokenFile {
                    path: path.clone(),
                    source,
                })?
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned(),
            None => std::env::var(TOKEN_ENV).unwrap_or_default(),
        };
        let token = token.trim().to_owned();
        if token.is_empty() {
            return Err(MoverError::NoToken);
        }
        Ok(token)
    }

    /// Checks the path against the mode and binds the address.
    pub async fn bind(&self) -> Result<(TcpListener, MountedVolume), MoverError> {
        let bad = |detail: String| MoverError::Path {
            path: self.path.clone(),
            detail,
        };
        let meta = std::fs::metadata(&self.path).map_err(|e| bad(e.to_string()))?;
        if self.mode == VolumeMode::Filesystem && !meta.is_dir() {
            return Err(bad("not a directory (use --mode block for a device)".into()));
        }
        if self.mode == VolumeMode::Block && meta.is_dir() {
            return Err(bad("a directory (use --mode filesystem)".into()));
        }
        let listener = TcpListener::bind(self.listen)
            .await
            .map_err(|source| MoverError::Bind {
                addr: self.listen,
                source,
            })?;
        let scratch = self.scratch.clone().unwrap_or_else(std::env::temp_dir);
        let volume = MountedVolume::new(self.mode, self.path.clone(), scratch);
        Ok((listener, volume))
    }
}

/// Serves `volume` on `listener` until `shutdown` completes, one stream at a time;
/// waits for the stream being served before it returns.
pub async fn serve(
    listener: TcpListener,
    volume: MountedVolume,
    token: String,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let volume = Arc::new(Mutex::new(volume));
    let token = Arc::new(token);
    let mut streams = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            biased;
            // Stopping first: a pod being deleted takes no new streams.
            () = &mut shutdown => break,
            // Reap finished streams so the set does not grow.
            Some(_) = streams.join_next(), if !streams.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((conn, peer)) => {
                    let (volume, token) = (volume.clone(), token.clone());
                    let span = tracing::info_span!("mover stream", %peer);
                    streams.spawn(tracing::Instrument::instrument(
                        async move { handle(conn, &volume, &token).await },
                        span,
                    ));
                }
                Err(e) => tracing::warn!(error = %e, "accepting a connection failed"),
            },
        }
    }
    tracing::info!(
        streams = streams.len(),
        "the mover stops: waiting for its streams"
    );
    while streams.join_next().await.is_some() {}
}

async fn handle(conn: TcpStream, volume: &Mutex<MountedVolume>, token: &str) {
    let _ = conn.set_nodelay(true);
    let mut conn = BufReader::new(conn);
    let ask = match tokio::time::timeout(FRAME_TIMEOUT, greeting(&mut conn, token)).await {
        Ok(Ok(ask)) => ask,
        Ok(Err(reason)) => {
            tracing::warn!(%reason, "refused a connection");
            let _ = write_frame(&mut conn, &VolumeFrame::Failed { reason }, &mut Vec::new()).await;
            let _ = conn.shutdown().await;
            return;
        }
        Err(_) => {
            tracing::warn!("a connection sent no token and header in {FRAME_TIMEOUT:?}");
            return;
        }
    };
    let what = format!("{ask:?}").chars().take(60).collect::<String>();
    tracing::info!(ask = %what, "serving a volume stream");
    // One stream at a time: a second pass waits for the first to finish.
    let volume = volume.lock().await;
    match crate::volume::serve_store(&*volume, ask, &mut conn).await {
        Ok(()) => tracing::info!("the volume stream completed"),
        Err(reason) => tracing::warn!(%reason, "the volume stream failed"),
    }
}

/// Reads the token line and the stream header; what to answer when either is wrong.
async fn greeting(conn: &mut BufReader<TcpStream>, token: &str) -> Result<VolumeOpen, String> {
    let mut line = Vec::new();
    (&mut *conn)
        .take(MAX_TOKEN_LINE)
        .read_until(b'\n', &mut line)
        .await
        .map_err(|e| format!("reading the token line: {e}"))?;
    let given = line.strip_suffix(b"\n").unwrap_or(&line);
    if !same(given, token.as_bytes()) {
        return Err(format!(
            "the mover refused the connection: its first line is not the mover's token ({TOKEN_ENV})"
        ));
    }
    let mut len = [0u8; FRAME_HEADER_LEN];
    conn.read_exact(&mut len)
        .await
        .map_err(|e| format!("reading the stream header: {e}"))?;
    let body = usize::try_from(u32::from_be_bytes(len)).unwrap_or(usize::MAX);
    if body > MAX_STREAM_HEADER {
        return Err(format!(
            "a stream header of {body} bytes, over {MAX_STREAM_HEADER}"
        ));
    }
    let mut frame = len.to_vec();
    frame.resize(FRAME_HEADER_LEN + body, 0);
    conn.read_exact(&mut frame[FRAME_HEADER_LEN..])
        .await
        .map_err(|e| format!("reading the stream header: {e}"))?;
    match decode_stream_open(&frame) {
        Ok(Some(StreamOpen::Volume(_, ask))) => match ask {
            VolumeOpen::Read { freeze: true, .. } => {
                Err("a mover reads a snapshot: the agent stops the writers, not the mover".into())
            }
            VolumeOpen::Read { .. } | VolumeOpen::Write { .. } | VolumeOpen::Replicate { .. } => {
                Ok(ask)
            }
            other => Err(format!(
                "a mover reads or writes a volume; it does not run {other:?}"
            )),
        },
        Ok(_) => Err("the header is not a volume stream's".into()),
        Err(e) => Err(format!("a bad stream header: {e}")),
    }
}

/// Compares in time independent of where the bytes differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The agent's side: connects to a mover at `addr`, sends `token` and the stream's
/// header; the connection then carries the volume stream (splice it onto the parent's).
pub async fn connect(
    addr: SocketAddr,
    token: &str,
    route: &TunnelOpen,
    ask: &VolumeOpen,
) -> std::io::Result<TcpStream> {
    let header = strata_node::volume::header(route, ask)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let mut conn = TcpStream::connect(addr).await?;
    conn.set_nodelay(true)?;
    let mut hello = Vec::with_capacity(token.len() + 1 + header.len());
    hello.extend_from_slice(token.as_bytes());
    hello.push(b'\n');
    hello.extend_from_slice(&header);
    conn.write_all(&hello).await?;
    Ok(conn)
}

#[cfg(test)]
mod tests;
