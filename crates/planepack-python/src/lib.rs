//! The native half of the `planepack` Python package (PyO3, abi3 for Python >= 3.9; the
//! Python half is `python/planepack/__init__.py`).
//!
//! Why a container and not a bare codec stream: an array compressed from Python must come back
//! with its dtype and shape, checksummed, and in parts a reader can bound; the `.ppk` container
//! of a `.npy` file already carries all of that (the `.npy` header is kept verbatim), so
//! `compress` writes exactly what `planepack compress x.npy` would, and `planepack decompress`
//! or `inspect` read it. The Python side builds the `.npy` header (numpy owns that format);
//! this side compresses header + data, and decompresses into a `bytearray` the Python side
//! views as an array without another copy. The GIL is released while coding.

use planepack_container::{CodecSpec, CompressOptions, Container, Error, Policy, ReadAt};
use pyo3::exceptions::{PyIOError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes};
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

/// The container error as the Python exception of the same class of failure.
fn to_py(e: Error) -> PyErr {
    match e {
        Error::Corrupt(m) => CorruptError::new_err(m),
        Error::Io(e) | Error::Output(e) => PyIOError::new_err(e.to_string()),
        e @ (Error::InvalidInput(_) | Error::Codec { .. }) => {
            InvalidInputError::new_err(e.to_string())
        }
    }
}

/// A tensor file (`.npy` or safetensors) that is a header followed by the tensors' bytes,
/// without joining them.
struct HeaderAndData<'a> {
    header: &'a [u8],
    data: &'a [u8],
}

impl ReadAt for HeaderAndData<'_> {
    fn size(&self) -> planepack_container::Result<u64> {
        Ok((self.header.len() + self.data.len()) as u64)
    }
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> planepack_container::Result<()> {
        let past = || Error::InvalidInput("read past the end of the array".into());
        let start = usize::try_from(offset).map_err(|_| past())?;
        let end = start.checked_add(buf.len()).ok_or_else(past)?;
        if end > self.header.len() + self.data.len() {
            return Err(past());
        }
        // The part of `buf` that falls in the header, then the part in the data.
        let split = self.header.len().clamp(start, end) - start;
        let (head, tail) = buf.split_at_mut(split);
        if split > 0 {
            head.copy_from_slice(&self.header[start..start + split]);
        }
        let from = (start + split) - self.header.len().min(start + split);
        tail.copy_from_slice(&self.data[from..from + tail.len()]);
        Ok(())
    }
}

/// Options that code a large array's parts (64 MiB each) on every core.
fn parallel(mut options: CompressOptions) -> CompressOptions {
    options.threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    options
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

/// Compress a `.npy` file given as its header and its data into container bytes.
#[pyfunction]
#[pyo3(signature = (header, data, codec = "auto", link = None, engine = None))]
fn compress_npy<'py>(
    py: Python<'py>,
    header: &[u8],
    data: &[u8],
    codec: &str,
    link: Option<f64>,
    engine: Option<f64>,
) -> PyResult<Bound<'py, PyBytes>> {
    let options = parallel(CompressOptions::new(policy(codec, link, engine)?, "array"));
    let packed = py.detach(|| {
        let mut out = Cursor::new(Vec::new());
        let input = HeaderAndData { header, data };
        planepack_container::compress(&input, &mut out, &options, |_| {}).map(|_| out)
    });
    Ok(PyBytes::new(py, &packed.map_err(to_py)?.into_inner()))
}

/// Decompress container bytes of a `.npy` file: its `.npy` header length and the whole file in
/// a new `bytearray` (header, then the array's bytes).
#[pyfunction]
fn decompress_npy<'py>(
    py: Python<'py>,
    packed: &[u8],
) -> PyResult<(usize, Bound<'py, PyByteArray>)> {
    let container = py
        .detach(|| Container::parse(packed, "array"))
        .map_err(to_py)?;
    if container.header.source != planepack_container::SourceKind::Npy {
        return Err(InvalidInputError::new_err(
            "this container holds a safetensors file, not one array",
        ));
    }
    let len = usize::try_from(container.header.original_len)
        .map_err(|_| CorruptError::new_err("original length does not fit in memory"))?;
    let mut result = Ok(());
    let out = PyByteArray::new_with(py, len, |buf| {
        result = py.detach(|| container.decompress_into(buf));
        Ok(())
    })?;
    result.map_err(to_py)?;
    Ok((container.header.preamble_len as usize, out))
}

/// Compress a safetensors file given as its header (length prefix included) and its data
/// region into a container file at `path` (written to a temporary file beside it, then renamed,
/// so a failure never leaves a file that looks valid).
#[pyfunction]
#[pyo3(signature = (header, data, path, codec = "auto", link = None, engine = None))]
fn compress_safetensors_to(
    py: Python<'_>,
    header: &[u8],
    data: &[u8],
    path: std::path::PathBuf,
    codec: &str,
    link: Option<f64>,
    engine: Option<f64>,
) -> PyResult<()> {
    let options = parallel(CompressOptions::new(policy(codec, link, engine)?, "array"));
    py.detach(|| -> PyResult<()> {
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        let tmp = tempfile::NamedTempFile::new_in(dir)?;
        {
            let mut w = std::io::BufWriter::new(tmp.as_file());
            let input = HeaderAndData { header, data };
            planepack_container::compress(&input, &mut w, &options, |_| {}).map_err(to_py)?;
        }
        tmp.persist(&path)
            .map_err(|e| PyIOError::new_err(e.to_string()))?;
        Ok(())
    })
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

    /// Decode one tensor (every part's checksums checked) into a new `bytearray`.
    fn read<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyByteArray>> {
        let i = self
            .container
            .index_of(name)
            .ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(name.to_owned()))?;
        let len = self.container.source.tensors[i].len as usize;
        let mut result = Ok(());
        let out = PyByteArray::new_with(py, len, |buf| {
            result = py.detach(|| self.container.read_into_parallel(i, buf));
            Ok(())
        })?;
        result.map_err(to_py)?;
        Ok(out)
    }
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
    m.add_function(wrap_pyfunction!(compress_npy, m)?)?;
    m.add_function(wrap_pyfunction!(decompress_npy, m)?)?;
    m.add_function(wrap_pyfunction!(codecs, m)?)?;
    m.add_function(wrap_pyfunction!(compress_safetensors_to, m)?)?;
    m.add_class::<Reader>()?;
    m.add("CorruptError", m.py().get_type::<CorruptError>())?;
    m.add("InvalidInputError", m.py().get_type::<InvalidInputError>())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every range of a header + data input reads as the same range of the joined bytes, and
    /// a range past the end is an error.
    #[test]
    fn header_and_data_read_as_one_file() {
        let (header, data) = (b"0123456789".to_vec(), b"abcdefghijklmnopq".to_vec());
        let joined = [header.clone(), data.clone()].concat();
        let input = HeaderAndData {
            header: &header,
            data: &data,
        };
        for start in 0..=joined.len() {
            for len in 0..=joined.len() - start {
                let mut buf = vec![0u8; len];
                input.read_exact_at(start as u64, &mut buf).unwrap();
                assert_eq!(buf, &joined[start..start + len], "{start}+{len}");
            }
            let mut over = vec![0u8; joined.len() - start + 1];
            assert!(input.read_exact_at(start as u64, &mut over).is_err());
        }
    }
}
