//! One error type for every decoder and encoder.
//!
//! Decoders read untrusted bytes. Each failure says *what* was wrong and, where it helps a
//! user find the fault, *where* (byte offset, chunk, block). Nothing in planepack panics on
//! bad input; these variants are how it says no instead.

use std::fmt;

/// Result alias used across planepack.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong when encoding or decoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The input ended before a structure that must be there.
    #[error(
        "truncated input: {what} needs {needed} bytes at offset {offset}, only {available} remain"
    )]
    Truncated {
        what: &'static str,
        offset: usize,
        needed: usize,
        available: usize,
    },
    /// The stream does not start with the magic number of the codec asked to decode it.
    #[error("bad magic: expected {expected:?}, found {found:?}")]
    BadMagic { expected: [u8; 4], found: [u8; 4] },
    /// A format version this build does not know.
    #[error("unsupported {format} version {version}")]
    UnsupportedVersion { format: &'static str, version: u8 },
    /// A structurally invalid stream, with a description of the violated rule.
    #[error("corrupt stream: {0}")]
    Corrupt(Corruption),
    /// The caller's output buffer does not have the length the stream decodes to.
    #[error("output buffer holds {provided} bytes but the stream decodes to {expected}")]
    OutputLength { expected: usize, provided: usize },
    /// The stream has bytes after its last structure.
    #[error("{extra} trailing bytes after the end of the stream")]
    TrailingBytes { extra: usize },
    /// A parameter that the codec cannot work with (element width, level, size).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A codec broke one of its own rules (it panicked, and the panic was caught where codecs
    /// are called: `planepack-container`'s engine). A bug in planepack, not in the input;
    /// never a result of bad input by design.
    #[error("internal error (a bug in planepack; please report it): {0}")]
    Internal(String),
}

/// Where in a stream a corruption was found, and which rule it broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corruption {
    /// Human-readable rule, e.g. "block bit length disagrees with its symbols".
    pub rule: String,
    /// Byte offset in the compressed stream where the offending structure starts, if known.
    pub offset: Option<usize>,
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.offset {
            Some(o) => write!(f, "{} (at byte {o})", self.rule),
            None => f.write_str(&self.rule),
        }
    }
}

impl Error {
    /// A corruption with no known position.
    pub fn corrupt(rule: impl Into<String>) -> Self {
        Error::Corrupt(Corruption {
            rule: rule.into(),
            offset: None,
        })
    }

    /// A corruption found in the structure starting at byte `offset`.
    pub fn corrupt_at(rule: impl Into<String>, offset: usize) -> Self {
        Error::Corrupt(Corruption {
            rule: rule.into(),
            offset: Some(offset),
        })
    }
}

/// Take `n` bytes at `offset` from `input`, or say what was missing.
pub fn take<'a>(input: &'a [u8], offset: usize, n: usize, what: &'static str) -> Result<&'a [u8]> {
    let end = offset.checked_add(n);
    match end {
        Some(end) if end <= input.len() => Ok(&input[offset..end]),
        _ => Err(Error::Truncated {
            what,
            offset,
            needed: n,
            available: input.len().saturating_sub(offset),
        }),
    }
}

/// Take a stream's fixed-size header and check its 4-byte magic and 1-byte version (the first
/// five bytes of every planepack stream header).
pub fn stream_header<'a>(
    input: &'a [u8],
    len: usize,
    magic: [u8; 4],
    version: u8,
    format: &'static str,
) -> Result<&'a [u8]> {
    let h = take(input, 0, len.max(5), format)?;
    let found: [u8; 4] = h[0..4].try_into().unwrap();
    if found != magic {
        return Err(Error::BadMagic {
            expected: magic,
            found,
        });
    }
    if h[4] != version {
        return Err(Error::UnsupportedVersion {
            format,
            version: h[4],
        });
    }
    Ok(h)
}
