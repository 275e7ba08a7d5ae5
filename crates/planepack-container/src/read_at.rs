//! Positioned reads: how the writer reads its input and the reader its container.
//!
//! Neither side memory-maps a file. A map turns a file that shrinks while it is read (another
//! process truncating it, a network file system) into SIGBUS, which kills the process; a
//! positioned read returns an error instead, and nothing of the file stays resident beyond
//! the piece being worked on.

use crate::{Error, Result};

/// Random-access input: a file (positioned reads) or bytes in memory.
pub trait ReadAt {
    /// The input's length now.
    fn size(&self) -> Result<u64>;
    /// Fill `buf` from `offset`; an input that ends first is an error.
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()>;
}

impl ReadAt for std::fs::File {
    fn size(&self) -> Result<u64> {
        Ok(self.metadata()?.len())
    }
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(self, buf, offset).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                ended_before(offset, buf.len())
            } else {
                Error::Io(e)
            }
        })
    }
}

impl ReadAt for [u8] {
    fn size(&self) -> Result<u64> {
        Ok(<[u8]>::len(self) as u64)
    }
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let src = usize::try_from(offset)
            .ok()
            .and_then(|s| self.get(s..s.checked_add(buf.len())?))
            .ok_or_else(|| ended_before(offset, buf.len()))?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

impl ReadAt for Vec<u8> {
    fn size(&self) -> Result<u64> {
        self.as_slice().size()
    }
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.as_slice().read_exact_at(offset, buf)
    }
}

impl<T: ReadAt + ?Sized> ReadAt for &T {
    fn size(&self) -> Result<u64> {
        (**self).size()
    }
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        (**self).read_exact_at(offset, buf)
    }
}

/// The input is shorter than its length said when reading began: it changed under us.
fn ended_before(offset: u64, len: usize) -> Error {
    Error::Io(std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        format!(
            "the file ends before byte {}: it was truncated while being read",
            offset.saturating_add(len as u64)
        ),
    ))
}
