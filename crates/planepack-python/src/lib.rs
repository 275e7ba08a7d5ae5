//! The native half of the `planepack` Python package (PyO3, abi3 for Python >= 3.9; the
//! Python half is `python/planepack/__init__.py`).
//!
//! Why a container and not a bare codec stream: an array compressed from Python must come back
//! with its dtype and shape, checksummed, and in parts a reader can bound; the `.ppk` container
//! of a `.npy` file already carries all of that (the `.npy` header is kept verbatim), so
//! `compress` writes exactly what `planepack compress x.npy` would, and `planepack decompress`
//! or `inspect` read it. The Python side builds the file header (numpy owns the `.npy` format;
//! a torch tensor is a one-tensor safetensors file); this side compresses header + data read in
//! place, and decodes into a numpy array (new, or the caller's) the Python side views without
//! another copy. The GIL is released while coding.

use planepack_container::{CodecSpec, CompressOptions, Container, Error, Policy, ReadAt};
use pyo3::exceptions::{PyIOError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use std::io::Cursor;

pyo3::create_exception!(
    _planepack,
    CorruptError,
    PyValueError,
    "A compressed input fails a structural check or a checksum."
);
pyo3::create_exception!(
    _planepack,
    InvalidInputError,
    PyValueError,
    "An input planepack cannot compress (unsupported dtype, malformed header, unknown codec)."
);

pyo3::create_exception!(
    _planepack,
    InternalError,
    pyo3::exceptions::PyRuntimeError,
    "A codec broke one of its own rules (a bug in planepack; the input may be fine). Raised \
     instead of letting a panic unwind into the interpreter."
);

/// The container error as the Python exception of the same class of failure.
fn to_py(e: Error) -> PyErr {
    match e {
        Error::Internal(m) => InternalError::new_err(m),
        Error::Corrupt(m) => CorruptError::new_err(m),
        Error::Io(e) | Error::Output(e) => PyIOError::new_err(e.to_string()),
        e @ (Error::InvalidInput(_) | Error::Codec { .. }) => {
            InvalidInputError::new_err(e.to_string())
        }
    }
}

/// The address and byte length of the memory of `obj`, which must be of exactly the type
/// `numpy.ndarray` (an arbitrary object's `__array_interface__` could name any address, so
/// nothing else is accepted: TypeError), C-contiguous, and `writable` if asked (ValueError).
fn array_memory(obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<(usize, usize)> {
    let ndarray = obj.py().import("numpy")?.getattr("ndarray")?;
    if !obj.get_type().is(&ndarray) {
        return Err(PyTypeError::new_err("expected a numpy.ndarray"));
    }
    let flags = obj.getattr("flags")?;
    let contiguous = flags.getattr("c_contiguous")?.extract::<bool>()?;
    if writable && !(contiguous && flags.getattr("writeable")?.extract::<bool>()?) {
        return Err(PyValueError::new_err(
            "out must be writable and C-contiguous",
        ));
    }
    if !contiguous {
        return Err(PyValueError::new_err("the array is not C-contiguous"));
    }
    let len: usize = obj.getattr("nbytes")?.extract()?;
    let (addr, _read_only): (usize, bool) = obj
        .getattr("__array_interface__")?
        .get_item("data")?
        .extract()?;
    Ok((addr, len))
}

/// One run of bytes of the input: a borrowed `bytes` object or a numpy array's buffer, read in
/// place.
#[derive(Clone, Copy)]
struct Segment {
    ptr: *const u8,
    len: usize,
}

/// A tensor file (`.npy` or safetensors) given as its header followed by the tensors' bytes in
/// one or more segments (the arrays of a dict), read without joining them: the container reads
/// each part through `read_exact_at`, so the only copy of an array is into the coder's part
/// buffer, as when the command reads a file.
struct Segments<'a> {
    header: &'a [u8],
    data: Vec<Segment>,
    /// Keeps every segment's owner (the `bytes` object or the array) alive while it is read,
    /// even if another thread empties the list meanwhile.
    _owners: Vec<Py<PyAny>>,
}

// SAFETY: the segments point into buffers their owners (held in `_owners`) keep alive and in
// place for the lifetime of `Segments`; they are only read. Sending the pointers to the
// threads that code the parts reads the same memory numpy's own GIL-releasing functions read.
unsafe impl Send for Segment {}
// SAFETY: as above; a `Segment` is never written through.
unsafe impl Sync for Segment {}

impl<'a> Segments<'a> {
    /// The input `header` followed by every object of `data`, each a `bytes` object or a numpy
    /// array of exactly the type `numpy.ndarray`, C-contiguous (other objects are refused: an
    /// arbitrary object's `__array_interface__` could name any address).
    fn new(header: &'a [u8], data: &Bound<'_, PyList>) -> PyResult<Self> {
        let mut segments = Vec::with_capacity(data.len());
        let mut owners = Vec::with_capacity(data.len());
        for item in data.iter() {
            let (ptr, len) = match item.cast::<PyBytes>() {
                Ok(b) => (b.as_bytes().as_ptr(), b.as_bytes().len()),
                Err(_) => {
                    let (addr, len) = array_memory(&item, false).map_err(|e| {
                        if e.is_instance_of::<PyTypeError>(item.py()) {
                            PyTypeError::new_err(format!(
                                "expected bytes or numpy.ndarray, got {}",
                                item.get_type().name().map_or("?".into(), |n| n.to_string())
                            ))
                        } else {
                            e
                        }
                    })?;
                    (addr as *const u8, len)
                }
            };
            segments.push(Segment { ptr, len });
            owners.push(item.unbind());
        }
        Ok(Segments {
            header,
            data: segments,
            _owners: owners,
        })
    }

    fn len(&self) -> usize {
        self.header.len() + self.data.iter().map(|s| s.len).sum::<usize>()
    }
}

impl ReadAt for Segments<'_> {
    fn size(&self) -> planepack_container::Result<u64> {
        Ok(self.len() as u64)
    }
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> planepack_container::Result<()> {
        let past = || Error::InvalidInput("read past the end of the array".into());
        let start = usize::try_from(offset).map_err(|_| past())?;
        let end = start.checked_add(buf.len()).ok_or_else(past)?;
        if end > self.len() {
            return Err(past());
        }
        let header = Segment {
            ptr: self.header.as_ptr(),
            len: self.header.len(),
        };
        // Walk the segments, copying the part of each that falls in start..end.
        let mut at = 0; // offset of the current segment in the joined input
        let mut filled = 0;
        for seg in std::iter::once(header).chain(self.data.iter().copied()) {
            let (lo, hi) = (start.max(at), end.min(at + seg.len));
            if lo < hi {
                // SAFETY: `lo - at .. hi - at` lies within the segment (checked just above),
                // whose owner keeps `seg.len` bytes readable at `seg.ptr`; `buf` is a distinct
                // Rust buffer with `hi - lo` bytes left at `filled` (the ranges tile start..end).
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        seg.ptr.add(lo - at),
                        buf.as_mut_ptr().add(filled),
                        hi - lo,
                    );
                }
                filled += hi - lo;
            }
            at += seg.len;
            if at >= end {
                break;
            }
        }
        debug_assert_eq!(filled, buf.len());
        Ok(())
    }
}

/// The writer's policy for a codec name (`auto`, or any name `planepack bench` prints).
fn policy(codec: &str, link: Option<f64>, engine: Option<f64>) -> PyResult<Policy> {
    let positive = |g: Option<f64>| g.is_none_or(|g| g.is_finite() && g > 0.0);
    if !positive(link) || !positive(engine) {
        return Err(PyValueError::new_err(
            "link and engine take a positive number of GB/s",
        ));
    }
    match (codec, link) {
        ("auto", Some(gbps)) => Ok(Policy::Link {
            gbps,
            engine_gbps: engine,
        }),
        ("auto", None) => Ok(Policy::BestRatio),
        (_, Some(_)) => Err(PyValueError::new_err("link applies to codec=\"auto\" only")),
        (name, None) => CodecSpec::parse(name).map(Policy::Fixed).ok_or_else(|| {
            PyValueError::new_err(format!(
                "unknown codec {name:?}; codecs are: auto, {}",
                CodecSpec::spellings()
            ))
        }),
    }
}

/// Writer options for a codec choice, every core coding a large input's parts.
fn options(
    codec: &str,
    link: Option<f64>,
    engine: Option<f64>,
    npy_name: &str,
) -> PyResult<CompressOptions> {
    let mut options = CompressOptions::new(policy(codec, link, engine)?, npy_name);
    options.threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    Ok(options)
}

/// The container of `input`, in memory.
fn compress_to_vec(
    input: &Segments<'_>,
    options: &CompressOptions,
) -> planepack_container::Result<Vec<u8>> {
    let mut out = Cursor::new(Vec::new());
    planepack_container::compress(input, &mut out, options, |_| {})?;
    Ok(out.into_inner())
}

/// Compress a tensor file (a `.npy` or safetensors header, then the tensors' bytes as a list of
/// `bytes` objects or C-contiguous numpy arrays, read in place) into container bytes.
#[pyfunction]
#[pyo3(signature = (header, data, codec = "auto", link = None, engine = None))]
fn compress_file<'py>(
    py: Python<'py>,
    header: &[u8],
    data: &Bound<'py, PyList>,
    codec: &str,
    link: Option<f64>,
    engine: Option<f64>,
) -> PyResult<Bound<'py, PyBytes>> {
    let options = options(codec, link, engine, "array")?;
    let input = Segments::new(header, data)?;
    let packed = py
        .detach(|| compress_to_vec(&input, &options))
        .map_err(to_py)?;
    Ok(PyBytes::new(py, &packed))
}

/// Decompress container bytes of one tensor (a `.npy` file, or a safetensors file of one
/// tensor): whether it is a `.npy`, the file's header (`.npy` header, or safetensors length
/// prefix and JSON), and the tensor's bytes, decoded into `out` when given (a writable,
/// C-contiguous `numpy.ndarray` of exactly the tensor's byte length; `None` is returned), else
/// into a new uint8 numpy array.
///
/// `check`, when given, is called with `(is_npy, header)` after the container is parsed and
/// before anything is decoded; an exception it raises aborts the call (the Python side checks
/// that `out` has the stored dtype and shape, with one parse).
#[pyfunction]
#[pyo3(signature = (packed, out = None, check = None))]
fn decompress_one<'py>(
    py: Python<'py>,
    packed: &[u8],
    out: Option<&Bound<'py, PyAny>>,
    check: Option<&Bound<'py, PyAny>>,
) -> PyResult<(bool, Bound<'py, PyBytes>, Option<Bound<'py, PyAny>>)> {
    let container = py
        .detach(|| Container::parse(packed, "array"))
        .map_err(to_py)?;
    let len = one_tensor_len(&container).map_err(to_py)?;
    let npy = container.header.source == planepack_container::SourceKind::Npy;
    let preamble = PyBytes::new(py, container.preamble());
    if let Some(check) = check {
        check.call1((npy, &preamble))?;
    }
    // A new uint8 array from numpy.empty when no `out` is given: no zero-fill pass before the
    // decoder writes every byte (a bytearray would be zeroed first).
    let (array, returned) = match out {
        Some(array) => (array.clone(), None),
        None => {
            let array = new_uint8(py, len)?;
            (array.clone(), Some(array))
        }
    };
    let target = WritableArray::new(&array)?;
    if target.len != len {
        return Err(PyValueError::new_err(format!(
            "out holds {} bytes; the tensor has {len}",
            target.len
        )));
    }
    py.detach(move || {
        // SAFETY: `WritableArray::new` checked that `array` is a writable, C-contiguous
        // numpy.ndarray of `target.len` bytes; `array` (held until this call returns) keeps
        // that memory alive. As with numpy's own GIL-releasing functions, the caller must not
        // touch the array from another thread meanwhile.
        let buf = unsafe { target.into_slice() };
        decode_one(&container, buf)
    })
    .map_err(to_py)?;
    Ok((npy, preamble, returned))
}

/// A new, uninitialised uint8 numpy array of `len` bytes (`numpy.empty`).
fn new_uint8(py: Python<'_>, len: usize) -> PyResult<Bound<'_, PyAny>> {
    py.import("numpy")?.getattr("empty")?.call1((len, "uint8"))
}

/// The byte length of the one tensor of a container (0 for an empty `.npy` entry list); a
/// container of several tensors is refused.
fn one_tensor_len<R: ReadAt>(container: &Container<R>) -> planepack_container::Result<usize> {
    match container.source.tensors.as_slice() {
        [] => Ok(0),
        [t] => usize::try_from(t.len)
            .map_err(|_| Error::Corrupt("the tensor's length does not fit in memory".into())),
        many => Err(Error::InvalidInput(format!(
            "this container holds a safetensors file of {} tensors; read it with load_file or safe_open",
            many.len()
        ))),
    }
}

/// Decode the one tensor of a container into `buf` (its exact length).
fn decode_one<R: ReadAt + Sync>(
    container: &Container<R>,
    buf: &mut [u8],
) -> planepack_container::Result<()> {
    if buf.is_empty() {
        Ok(())
    } else {
        container.read_into_parallel(0, buf)
    }
}

/// The memory of a writable, C-contiguous array of exactly the type `numpy.ndarray`.
struct WritableArray {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the pointer is used only inside `decompress_one`, while the array it came from is
// borrowed; moving it to the decoding threads is what numpy's own threaded functions do.
unsafe impl Send for WritableArray {}

impl WritableArray {
    /// The array's memory as a slice.
    ///
    /// # Safety
    /// The array `new` was given must outlive the slice, and nothing else may access its
    /// memory meanwhile.
    unsafe fn into_slice<'a>(self) -> &'a mut [u8] {
        // SAFETY: `ptr` is valid for `len` bytes (numpy's buffer, or dangling when empty),
        // as the caller's contract keeps it.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    fn new(array: &Bound<'_, PyAny>) -> PyResult<Self> {
        let (addr, len) = array_memory(array, true).map_err(|e| {
            if e.is_instance_of::<PyTypeError>(array.py()) {
                PyTypeError::new_err("out must be a numpy.ndarray")
            } else {
                e
            }
        })?;
        Ok(WritableArray {
            ptr: if len == 0 {
                std::ptr::NonNull::dangling().as_ptr()
            } else {
                addr as *mut u8
            },
            len,
        })
    }
}

/// Write a file at `path` through `write`, atomically: into a temporary file beside it, renamed
/// over `path` only when `write` succeeded, so a failure never leaves a file that looks valid.
fn write_atomically(
    path: &std::path::Path,
    write: impl FnOnce(&mut std::io::BufWriter<&std::fs::File>) -> PyResult<()>,
) -> PyResult<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let tmp = tempfile::NamedTempFile::new_in(dir)?;
    {
        let mut w = std::io::BufWriter::new(tmp.as_file());
        write(&mut w)?;
        std::io::Write::flush(&mut w)?;
    }
    tmp.persist(path)
        .map_err(|e| PyIOError::new_err(e.to_string()))?;
    Ok(())
}

/// Compress a tensor file given as for `compress_file` into a container file at `path`
/// (written atomically).
#[pyfunction]
#[pyo3(signature = (header, data, path, codec = "auto", link = None, engine = None))]
fn compress_file_to(
    py: Python<'_>,
    header: &[u8],
    data: &Bound<'_, PyList>,
    path: std::path::PathBuf,
    codec: &str,
    link: Option<f64>,
    engine: Option<f64>,
) -> PyResult<()> {
    let options = options(codec, link, engine, "array")?;
    let input = Segments::new(header, data)?;
    py.detach(|| {
        write_atomically(&path, |w| {
            planepack_container::compress(&input, w, &options, |_| {}).map_err(to_py)?;
            Ok(())
        })
    })
}

/// Compress the `.npy` or `.safetensors` file at `src` into a container file at `dst` (what
/// `planepack compress` does; `dst` written atomically).
#[pyfunction]
#[pyo3(signature = (src, dst, codec = "auto", link = None, engine = None))]
fn compress_path(
    py: Python<'_>,
    src: std::path::PathBuf,
    dst: std::path::PathBuf,
    codec: &str,
    link: Option<f64>,
    engine: Option<f64>,
) -> PyResult<()> {
    let name = src
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("array")
        .to_owned();
    let options = options(codec, link, engine, &name)?;
    py.detach(|| {
        let input = std::fs::File::open(&src)
            .map_err(|e| PyIOError::new_err(format!("{}: {e}", src.display())))?;
        if !input.metadata()?.is_file() {
            return Err(InvalidInputError::new_err(format!(
                "{}: not a regular file",
                src.display()
            )));
        }
        write_atomically(&dst, |w| {
            planepack_container::compress(&input, w, &options, |_| {}).map_err(to_py)?;
            Ok(())
        })
    })
}

/// Restore the original file of the container at `src` to `dst`, byte for byte, every
/// checksum checked (what `planepack decompress` does; `dst` written atomically).
#[pyfunction]
fn decompress_path(
    py: Python<'_>,
    src: std::path::PathBuf,
    dst: std::path::PathBuf,
) -> PyResult<()> {
    py.detach(|| {
        let container = Container::open(&src, "array").map_err(to_py)?;
        write_atomically(&dst, |w| container.decompress_to(w, |_| {}).map_err(to_py))
    })
}

/// `planepack bench --json` on tensor files: the harness's records as a JSON string.
#[pyfunction]
#[pyo3(signature = (paths, codecs = Vec::new(), quick = false))]
fn bench_files(
    py: Python<'_>,
    paths: Vec<std::path::PathBuf>,
    codecs: Vec<String>,
    quick: bool,
) -> PyResult<String> {
    use planepack_harness::files::FilesError;
    let results = py
        .detach(|| {
            planepack_harness::files::bench_files(
                &paths,
                &codecs,
                quick,
                "planepack.bench (Python)".into(),
                |_, _, _| {},
            )
        })
        .map_err(|e| match e {
            FilesError::Io(m) => PyIOError::new_err(m),
            FilesError::InvalidInput(m) => InvalidInputError::new_err(m),
            FilesError::Usage(m) => PyValueError::new_err(m),
            FilesError::Internal(m) => pyo3::exceptions::PyRuntimeError::new_err(m),
        })?;
    serde_json::to_string(&results)
        .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(e.to_string()))
}

/// A container opened for reading one tensor at a time (`planepack.safe_open`).
#[pyclass]
struct Reader {
    container: Container<std::fs::File>,
}

#[pymethods]
impl Reader {
    #[new]
    fn open(py: Python<'_>, path: std::path::PathBuf) -> PyResult<Self> {
        let name = path
            .file_name()
            .and_then(|s| s.to_str())
            .map(|s| {
                s.trim_end_matches(".ppk")
                    .trim_end_matches(".npy")
                    .to_owned()
            })
            .unwrap_or_else(|| "array".into());
        let container = py.detach(|| Container::open(&path, &name)).map_err(to_py)?;
        Ok(Reader { container })
    }

    /// The stored original header (the safetensors JSON with its length prefix, or the .npy
    /// header), verbatim.
    fn preamble<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.container.preamble())
    }

    /// (name, safetensors dtype, shape) of every tensor, in file order.
    fn tensors(&self) -> Vec<(String, String, Vec<usize>)> {
        self.container
            .source
            .tensors
            .iter()
            .map(|t| (t.name.clone(), t.dtype.clone(), t.shape.clone()))
            .collect()
    }

    /// Decode one tensor (every part's checksums checked) into a new uint8 numpy array.
    fn read<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        let i = self
            .container
            .index_of(name)
            .ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(name.to_owned()))?;
        let array = new_uint8(py, self.container.source.tensors[i].len as usize)?;
        let target = WritableArray::new(&array)?;
        py.detach(move || {
            // SAFETY: `array` is a new, writable, C-contiguous numpy.ndarray of the tensor's
            // length that only this function holds until it returns.
            let buf = unsafe { target.into_slice() };
            self.container.read_into_parallel(i, buf)
        })
        .map_err(to_py)?;
        Ok(array)
    }
}

/// For the speed benchmark (`benches/speed.py`): seconds of each of `runs` runs of the Rust
/// container's compress of the input `compress_file` takes (into a new `Vec`), timed in Rust
/// with no Python in the loop, and the compressed bytes. No warm-up: the caller interleaves.
#[pyfunction]
fn time_compress<'py>(
    py: Python<'py>,
    header: &[u8],
    data: &Bound<'py, PyList>,
    codec: &str,
    runs: usize,
) -> PyResult<(Vec<f64>, Bound<'py, PyBytes>)> {
    let options = options(codec, None, None, "array")?;
    let input = Segments::new(header, data)?;
    let (secs, packed) = py
        .detach(|| {
            let mut secs = Vec::with_capacity(runs);
            let mut packed = Vec::new();
            for _ in 0..runs {
                let start = std::time::Instant::now();
                packed = compress_to_vec(&input, &options)?;
                secs.push(start.elapsed().as_secs_f64());
            }
            Ok::<_, Error>((secs, packed))
        })
        .map_err(to_py)?;
    Ok((secs, PyBytes::new(py, &packed)))
}

/// For the speed benchmark: seconds of each of `runs` runs of the Rust container's decode of
/// the one tensor of `packed` (parse included, as every caller must): into a new `Vec` each
/// time, or into `out` (a writable C-contiguous array of the tensor's length, as with `out=`).
#[pyfunction]
#[pyo3(signature = (packed, runs, out = None))]
fn time_decompress(
    py: Python<'_>,
    packed: &[u8],
    runs: usize,
    out: Option<&Bound<'_, PyAny>>,
) -> PyResult<Vec<f64>> {
    let target = out.map(WritableArray::new).transpose()?;
    py.detach(move || {
        // SAFETY: as in `decompress_one`: `out` is borrowed for this call and is a writable,
        // C-contiguous numpy.ndarray of `target.len` bytes.
        let mut target = target.map(|t| unsafe { t.into_slice() });
        let mut secs = Vec::with_capacity(runs);
        for _ in 0..runs {
            let start = std::time::Instant::now();
            let container = Container::parse(packed, "array")?;
            let len = one_tensor_len(&container)?;
            let mut fresh = Vec::new();
            let buf: &mut [u8] = match target.as_deref_mut() {
                Some(t) if t.len() == len => t,
                Some(_) => return Err(Error::InvalidInput("out has the wrong length".into())),
                None => {
                    fresh.resize(len, 0);
                    &mut fresh
                }
            };
            decode_one(&container, buf)?;
            std::hint::black_box(&buf);
            secs.push(start.elapsed().as_secs_f64());
        }
        Ok(secs)
    })
    .map_err(to_py)
}

/// The names `codec=` takes.
#[pyfunction]
fn codecs() -> Vec<String> {
    let mut v = vec!["auto".to_owned()];
    v.extend(CodecSpec::bench_set().iter().map(|c| c.name()));
    v
}

#[pymodule]
fn _planepack(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(compress_file, m)?)?;
    m.add_function(wrap_pyfunction!(decompress_one, m)?)?;
    m.add_function(wrap_pyfunction!(compress_file_to, m)?)?;
    m.add_function(wrap_pyfunction!(compress_path, m)?)?;
    m.add_function(wrap_pyfunction!(decompress_path, m)?)?;
    m.add_function(wrap_pyfunction!(bench_files, m)?)?;
    m.add_function(wrap_pyfunction!(time_compress, m)?)?;
    m.add_function(wrap_pyfunction!(time_decompress, m)?)?;
    m.add_function(wrap_pyfunction!(codecs, m)?)?;
    m.add_class::<Reader>()?;
    m.add("CorruptError", m.py().get_type::<CorruptError>())?;
    m.add("InvalidInputError", m.py().get_type::<InvalidInputError>())?;
    m.add("InternalError", m.py().get_type::<InternalError>())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every range of a header + segments input reads as the same range of the joined bytes,
    /// and a range past the end is an error.
    #[test]
    fn segments_read_as_one_file() {
        Python::initialize();
        Python::attach(|py| {
            let header = b"0123456789".to_vec();
            let chunks: [&[u8]; 4] = [b"abcdefg", b"", b"hij", b"klmnopq"];
            let joined = [header.as_slice(), &chunks.concat()].concat();
            let list = PyList::new(py, chunks.iter().map(|c| PyBytes::new(py, c))).unwrap();
            let input = Segments::new(&header, &list).unwrap();
            for start in 0..=joined.len() {
                for len in 0..=joined.len() - start {
                    let mut buf = vec![0u8; len];
                    input.read_exact_at(start as u64, &mut buf).unwrap();
                    assert_eq!(buf, &joined[start..start + len], "{start}+{len}");
                }
                let mut over = vec![0u8; joined.len() - start + 1];
                assert!(input.read_exact_at(start as u64, &mut over).is_err());
            }
        });
    }
}
