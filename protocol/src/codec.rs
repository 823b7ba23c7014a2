//! Framing and encoding of wire messages (bincode is confined to this module).

use serde::Serialize;
use serde::de::DeserializeOwned;

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
    bincode::serde::encode_to_vec(value, bincode::config::standard()).map_err(|e| ValueError {
        len: 0,
        detail: e.to_string(),
    })
}

/// Decodes a value written by [`encode_value`]; all bytes must be consumed.
pub fn decode_value<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ValueError> {
    let config = bincode::config::standard().with_limit::<{ 64 << 20 }>();
    let err = |detail: String| ValueError {
        len: bytes.len(),
        detail,
    };
    let (value, used) =
        bincode::serde::decode_from_slice(bytes, config).map_err(|e| err(e.to_string()))?;
    if used != bytes.len() {
        return Err(err(format!("{} trailing bytes", bytes.len() - used)));
    }
    Ok(value)
}
