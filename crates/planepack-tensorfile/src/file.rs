//! A tensor file on disk, read a tensor (or a range of one) at a time.

use crate::{Error, Invalid, Source, PROBE_LEN};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::ops::Range;
use std::path::Path;

/// An open `.safetensors` or `.npy` file whose header has been read and checked: only the
/// header is read when it is opened, then any tensor, or any byte range of one, on request, so
/// a caller holds at most what it asked for (a file larger than memory can be measured).
#[derive(Debug)]
pub struct TensorFile {
    file: File,
    source: Source,
}

impl TensorFile {
    /// Open a file and parse its header. `npy_name` names a `.npy` file's one array.
    pub fn open(path: &Path, npy_name: &str) -> Result<TensorFile, Error> {
        let mut file = File::open(path)?;
        let len = file.metadata()?.len();
        let mut head = vec![0u8; (len as usize).min(PROBE_LEN)];
        file.read_exact(&mut head)?;
        let (kind, pre) = Source::preamble_len_of(&head, len)?;
        // `preamble_len_of` checked that the file holds the preamble (at most 100 MB), so
        // reading it allocates no more than the file justifies.
        let mut preamble = vec![0u8; pre as usize];
        file.seek(SeekFrom::Start(0))?;
        file.read_exact(&mut preamble)?;
        let source = Source::parse(kind, &preamble, len, npy_name)?;
        Ok(TensorFile { file, source })
    }

    /// What the header says: the kind of file and its tensors in file order.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// Read tensor `i`'s bytes (an index into `source().tensors`).
    pub fn read(&mut self, i: usize) -> Result<Vec<u8>, Error> {
        let len = self.span_len(i)?;
        self.read_range(i, 0..len)
    }

    /// Read bytes `range` of tensor `i` (the range within the tensor).
    pub fn read_range(&mut self, i: usize, range: Range<u64>) -> Result<Vec<u8>, Error> {
        let len = self.span_len(i)?;
        if range.start > range.end || range.end > len {
            return Err(Invalid(format!("bytes {range:?} of a {len}-byte tensor")).into());
        }
        let offset = self.source.tensors[i].offset + range.start;
        // The length was checked against the file's at open and the range against the
        // tensor: a file that shrank since is an I/O error from read_exact.
        let mut data = vec![0u8; (range.end - range.start) as usize];
        self.file.seek(SeekFrom::Start(offset))?;
        self.file.read_exact(&mut data)?;
        Ok(data)
    }

    fn span_len(&self, i: usize) -> Result<u64, Error> {
        self.source
            .tensors
            .get(i)
            .map(|t| t.len)
            .ok_or_else(|| Invalid(format!("no tensor {i}")).into())
    }
}
