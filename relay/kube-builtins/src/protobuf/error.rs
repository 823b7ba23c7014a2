//! Why a body does not decode ([`DecodeError`]), and how deep its messages may nest
//! ([`MAX_DEPTH`]).

/// How deep messages may nest in a body (a CRD's schema is the deepest built-in shape).
pub const MAX_DEPTH: usize = 100;

/// Why a body does not decode: what was wrong, and where (byte offset in the body, and
/// the JSON path of the message being read).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The body does not start with `k8s\0`.
    #[error("no k8s protobuf envelope: the body does not start with \"k8s\\0\"")]
    NoEnvelope,
    /// The envelope names no apiVersion or kind.
    #[error("the envelope's typeMeta names no apiVersion and kind")]
    NoTypeMeta,
    /// The envelope's object is compressed or otherwise encoded.
    #[error("content encoding {0:?} is not supported")]
    ContentEncoding(String),
    /// The envelope names a kind this server has no table for.
    #[error("unknown kind {api_version} {kind}")]
    UnknownKind {
        /// The envelope's apiVersion.
        api_version: String,
        /// The envelope's kind.
        kind: String,
    },
    /// The body ends inside a varint, a length-delimited field or a fixed-size value.
    #[error("truncated {what} at byte {offset} in {path}")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Where it starts in the body.
        offset: usize,
        /// The message it is in.
        path: String,
    },
    /// A varint of more than ten bytes.
    #[error("varint longer than 10 bytes at byte {offset} in {path}")]
    VarintTooLong {
        /// Where it starts in the body.
        offset: usize,
        /// The message it is in.
        path: String,
    },
    /// A tag with field number 0 or a wire type protobuf does not have (or the
    /// deprecated groups).
    #[error("bad tag (field {field}, wire type {wire}) at byte {offset} in {path}")]
    BadTag {
        /// The field number.
        field: u64,
        /// The wire type.
        wire: u8,
        /// Where the tag starts.
        offset: usize,
        /// The message it is in.
        path: String,
    },
    /// A known field with another wire type than its declared type has.
    #[error("wrong wire type {wire} for field {field} of {message} at byte {offset} in {path}")]
    WrongWireType {
        /// The field number.
        field: u32,
        /// The message's name (`io.k8s.api.core.v1.PodSpec`).
        message: String,
        /// The wire type found.
        wire: u8,
        /// Where the tag starts.
        offset: usize,
        /// The message's JSON path.
        path: String,
    },
    /// A string field that is not UTF-8.
    #[error("a string is not UTF-8 at byte {offset} in {path}")]
    NotUtf8 {
        /// Where the string starts.
        offset: usize,
        /// The field's JSON path.
        path: String,
    },
    /// Embedded JSON (RawExtension, JSON, FieldsV1) that does not parse.
    #[error("embedded JSON at byte {offset} in {path} does not parse: {reason}")]
    BadJson {
        /// Where it starts.
        offset: usize,
        /// The field's JSON path.
        path: String,
        /// serde_json's message.
        reason: String,
    },
    /// A double that JSON cannot hold (NaN, infinity).
    #[error("a number that is not finite at byte {offset} in {path}")]
    NotFinite {
        /// Where it starts.
        offset: usize,
        /// The field's JSON path.
        path: String,
    },
    /// Messages nested deeper than [`MAX_DEPTH`].
    #[error("messages nest deeper than {MAX_DEPTH} at {path}")]
    TooDeep {
        /// The message's JSON path.
        path: String,
    },
    /// The compiled-in table is malformed (a build defect, caught by the unit tests).
    #[error("the protobuf field table is malformed at line {0}")]
    Table(usize),
}
