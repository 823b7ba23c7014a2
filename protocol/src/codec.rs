//! Framing and encoding of wire messages. bincode (pinned at 2.0.1) is confined to this
//! module: nothing else in the workspace knows how messages become bytes.
//!
//! A frame is a 4-byte big-endian body length followed by the bincode body. Decoding is
//! check-then-parse: the declared length is checked against the maximum frame size
//! before anything is allocated or awaited, the body is parsed only once it is whole,
//! it must be consumed exactly, and no input makes the decoder panic. bincode's own
//! allocation limit bounds what a corrupt length inside a body can ask for.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Bytes of the length prefix.
pub const FRAME_HEADER_LEN: usize = 4;

/// The default maximum body size of one frame: 16 MiB.
pub const DEFAULT_MAX_FRAME: usize = 16 << 20;

/// The largest body any frame may have, whatever maximum a caller asks for: it keeps
/// the decoder's allocation bound (below) finite.
pub const MAX_FRAME_CEILING: usize = 256 << 20;

type Config<const LIMIT: usize> = bincode::config::Configuration<
    bincode::config::BigEndian,
    bincode::config::Varint,
    bincode::config::Limit<LIMIT>,
>;

fn config<const LIMIT: usize>() -> Config<LIMIT> {
    bincode::config::standard()
        .with_big_endian()
        .with_variable_int_encoding()
        .with_limit::<LIMIT>()
}

/// Decodes a body under an allocation limit scaled to its length. bincode charges every
/// value at its in-memory size (a `u64` costs 8 even when it took 1 byte), so a valid
/// body of n bytes may need up to 16·n; a fixed limit would refuse valid, integer-dense
/// messages. The limit is 16 times the largest body of the body's size class, so valid
/// bodies always decode and a corrupt length inside a body can claim at most 1 MiB, or
/// 256 times the body's length.
fn decode_body<M: DeserializeOwned>(body: &[u8]) -> Result<(M, usize), String> {
    let r = match body.len() {
        n if n <= 64 << 10 => bincode::serde::decode_from_slice(body, config::<{ 1 << 20 }>()),
        n if n <= 1 << 20 => bincode::serde::decode_from_slice(body, config::<{ 16 << 20 }>()),
        n if n <= 16 << 20 => bincode::serde::decode_from_slice(body, config::<{ 256 << 20 }>()),
        _ => bincode::serde::decode_from_slice(body, config::<{ 16 * MAX_FRAME_CEILING }>()),
    };
    r.map_err(|e| e.to_string())
}

/// The encoder's configuration (limits apply only when decoding).
fn encoding() -> Config<{ 16 * MAX_FRAME_CEILING }> {
    config()
}

/// Why a message could not be framed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The body exceeds the maximum frame size; nothing was written.
    #[error("message of {len} bytes exceeds the maximum frame of {max} bytes")]
    Oversized {
        /// Body length.
        len: usize,
        /// The maximum.
        max: usize,
    },
    /// The message could not be serialized.
    #[error("cannot encode message: {detail}")]
    Serialize {
        /// The encoder's message.
        detail: String,
    },
}

/// Why bytes could not be decoded into a message. After an error the stream is not
/// resynchronizable: close it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The header declares a body larger than the maximum frame size.
    #[error("frame declares {len} bytes, more than the maximum of {max}")]
    Oversized {
        /// Declared body length.
        len: usize,
        /// The maximum.
        max: usize,
    },
    /// The body is not a valid message.
    #[error("corrupt frame of {len} bytes: {detail}")]
    Corrupt {
        /// Body length.
        len: usize,
        /// The decoder's message.
        detail: String,
    },
    /// The body holds a valid message followed by bytes that belong to none.
    #[error("frame of {len} bytes holds a message of {used} bytes and trailing garbage")]
    TrailingBytes {
        /// Body length.
        len: usize,
        /// Bytes the message used.
        used: usize,
    },
}

/// Appends one frame holding `msg` to `out` and returns the frame's length (header
/// included). Refuses, writing nothing, a body over `max_frame`.
pub fn encode<M: Serialize>(
    msg: &M,
    max_frame: usize,
    out: &mut Vec<u8>,
) -> Result<usize, EncodeError> {
    let start = out.len();
    out.extend_from_slice(&[0; FRAME_HEADER_LEN]);
    let max_frame = max_frame.min(MAX_FRAME_CEILING);
    let len = match bincode::serde::encode_into_std_write(msg, out, encoding()) {
        Ok(len) => len,
        Err(e) => {
            out.truncate(start);
            return Err(EncodeError::Serialize {
                detail: e.to_string(),
            });
        }
    };
    let header = match u32::try_from(len) {
        Ok(h) if len <= max_frame => h,
        _ => {
            out.truncate(start);
            return Err(EncodeError::Oversized {
                len,
                max: max_frame,
            });
        }
    };
    out[start..start + FRAME_HEADER_LEN].copy_from_slice(&header.to_be_bytes());
    Ok(FRAME_HEADER_LEN + len)
}

/// The length of the frame [`encode`] would write for `msg`, header included.
pub fn encoded_len<M: Serialize>(msg: &M) -> Result<usize, EncodeError> {
    bincode::serde::encode_into_std_write(msg, &mut std::io::sink(), encoding())
        .map(|len| FRAME_HEADER_LEN + len)
        .map_err(|e| EncodeError::Serialize {
            detail: e.to_string(),
        })
}

/// Decodes the frame at the start of `buf`: `Ok(None)` while `buf` holds less than a
/// whole frame, otherwise the message and the bytes consumed. A declared length over
/// `max_frame` is refused from the header alone.
pub fn decode<M: DeserializeOwned>(
    buf: &[u8],
    max_frame: usize,
) -> Result<Option<(M, usize)>, DecodeError> {
    let Some(header) = buf.first_chunk::<FRAME_HEADER_LEN>() else {
        return Ok(None);
    };
    let max_frame = max_frame.min(MAX_FRAME_CEILING);
    let len = usize::try_from(u32::from_be_bytes(*header)).unwrap_or(usize::MAX);
    if len > max_frame {
        return Err(DecodeError::Oversized {
            len,
            max: max_frame,
        });
    }
    let Some(body) = buf.get(FRAME_HEADER_LEN..FRAME_HEADER_LEN + len) else {
        return Ok(None);
    };
    let (msg, used) = decode_body(body).map_err(|detail| DecodeError::Corrupt { len, detail })?;
    if used != len {
        return Err(DecodeError::TrailingBytes { len, used });
    }
    Ok(Some((msg, FRAME_HEADER_LEN + len)))
}

/// Accumulates bytes from a stream and yields whole messages. Never buffers more than
/// one frame's header and body beyond what it has yielded: an oversized declaration is
/// refused as soon as its header arrives.
#[derive(Debug)]
pub struct FrameDecoder {
    /// Bytes received; those before `start` were yielded already.
    buf: Vec<u8>,
    start: usize,
    max_frame: usize,
    failed: Option<DecodeError>,
}

/// Capacity a decoder keeps once it has yielded everything it held. A bulk snapshot
/// can grow the buffer to megabytes; an idle link should not keep them.
const RETAINED_CAPACITY: usize = 16 * 1024;

impl FrameDecoder {
    /// A decoder refusing bodies over `max_frame` bytes.
    pub fn new(max_frame: usize) -> Self {
        FrameDecoder {
            buf: Vec::new(),
            start: 0,
            max_frame,
            failed: None,
        }
    }

    /// Bytes received but not yet yielded as messages.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Adds bytes read from the stream. Call [`FrameDecoder::next_message`] until it returns
    /// `Ok(None)` before reading more, so the buffer stays within one frame.
    pub fn extend(&mut self, bytes: &[u8]) {
        if self.failed.is_some() {
            return;
        }
        if self.start > 0 {
            // What was yielded goes before more arrives: one move per read, not one per
            // message.
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole message, `Ok(None)` if more bytes are needed. Once it has
    /// returned an error it returns the same error forever.
    pub fn next_message<M: DeserializeOwned>(&mut self) -> Result<Option<M>, DecodeError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        match decode(&self.buf[self.start..], self.max_frame) {
            Ok(Some((msg, used))) => {
                self.start += used;
                if self.start == self.buf.len() {
                    self.buf.clear();
                    self.start = 0;
                    if self.buf.capacity() > RETAINED_CAPACITY {
                        self.buf = Vec::new();
                    }
                }
                Ok(Some(msg))
            }
            Ok(None) => Ok(None),
            Err(e) => {
                self.buf = Vec::new();
                self.start = 0;
                self.failed = Some(e.clone());
                Err(e)
            }
        }
    }
}

/// Why a value could not be decoded from stored bytes.
#[derive(Debug, thiserror::Error)]
#[error("corrupt stored value ({len} bytes): {detail}")]
pub struct ValueError {
    /// Length of the bytes given.
    pub len: usize,
    /// What the decoder found.
    pub detail: String,
}

/// Encodes a value for storage (not a frame: no length prefix). Drivers persist protocol
/// values with this, so that the byte encoding stays in one module.
pub fn encode_value<T: Serialize>(value: &T) -> Result<Vec<u8>, ValueError> {
    bincode::serde::encode_to_vec(value, encoding()).map_err(|e| ValueError {
        len: 0,
        detail: e.to_string(),
    })
}

/// Decodes a value written by [`encode_value`]; all bytes must be consumed.
pub fn decode_value<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ValueError> {
    let err = |detail: String| ValueError {
        len: bytes.len(),
        detail,
    };
    let (value, used) = decode_body(bytes).map_err(err)?;
    if used != bytes.len() {
        return Err(err(format!("{} trailing bytes", bytes.len() - used)));
    }
    Ok(value)
}
