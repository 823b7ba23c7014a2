//! The protobuf wire format: a [`Reader`] of tags and values (varints, fixed-size,
//! length-delimited) that checks every length against the bytes that remain.

use super::error::DecodeError;

#[derive(Debug, Clone, Copy)]
pub(super) enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    /// The bytes and their offset in the body.
    Len(&'a [u8], usize),
}

impl Wire<'_> {
    pub(super) fn wire(&self) -> u8 {
        match self {
            Wire::Varint(_) => 0,
            Wire::Fixed64(_) => 1,
            Wire::Len(..) => 2,
            Wire::Fixed32(_) => 5,
        }
    }
}

pub(super) struct Reader<'a, 'p> {
    pub(super) buf: &'a [u8],
    /// The offset of `buf[0]` in the body.
    pub(super) at: usize,
    pub(super) path: &'p str,
}

impl<'a, 'p> Reader<'a, 'p> {
    pub(super) fn new(buf: &'a [u8], at: usize, path: &'p str) -> Self {
        Reader { buf, at, path }
    }

    pub(super) fn path(&self) -> String {
        if self.path.is_empty() {
            ".".into()
        } else {
            self.path.into()
        }
    }

    pub(super) fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        if n > self.buf.len() {
            return Err(DecodeError::Truncated {
                what,
                offset: self.at,
                path: self.path(),
            });
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        self.at += n;
        Ok(head)
    }

    pub(super) fn varint(&mut self) -> Result<u64, DecodeError> {
        let start = self.at;
        let mut out = 0u64;
        for i in 0..10 {
            let Some((&b, rest)) = self.buf.split_first() else {
                return Err(DecodeError::Truncated {
                    what: "varint",
                    offset: start,
                    path: self.path(),
                });
            };
            self.buf = rest;
            self.at += 1;
            out |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(out);
            }
        }
        Err(DecodeError::VarintTooLong {
            offset: start,
            path: self.path(),
        })
    }

    /// The next field: its number, where its tag starts, its payload.
    pub(super) fn next(&mut self) -> Result<Option<(u64, usize, Wire<'a>)>, DecodeError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let start = self.at;
        let tag = self.varint()?;
        let (field, wire) = (tag >> 3, (tag & 7) as u8);
        if field == 0 || field > u64::from(u32::MAX >> 3) {
            return Err(DecodeError::BadTag {
                field,
                wire,
                offset: start,
                path: self.path(),
            });
        }
        let value = match wire {
            0 => Wire::Varint(self.varint()?),
            1 => {
                let b = self.take(8, "fixed64")?;
                Wire::Fixed64(u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
            }
            2 => {
                let len = self.varint()?;
                let len = usize::try_from(len).unwrap_or(usize::MAX);
                let at = self.at;
                Wire::Len(self.take(len, "length-delimited field")?, at)
            }
            5 => {
                let b = self.take(4, "fixed32")?;
                Wire::Fixed32(u32::from_le_bytes(b.try_into().unwrap_or([0; 4])))
            }
            _ => {
                return Err(DecodeError::BadTag {
                    field,
                    wire,
                    offset: start,
                    path: self.path(),
                });
            }
        };
        Ok(Some((field, start, value)))
    }
}

pub(super) fn text(b: &[u8], offset: usize, path: &str) -> Result<String, DecodeError> {
    std::str::from_utf8(b)
        .map(str::to_owned)
        .map_err(|_| DecodeError::NotUtf8 {
            offset,
            path: path.to_owned(),
        })
}
