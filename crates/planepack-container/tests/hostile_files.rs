//! Hostile containers, committed under `tests/hostile/` so that the command's tests and the
//! Python package's tests feed the very same files to their readers. Each is a valid container
//! of a small safetensors file whose one payload was replaced (`forge::with_payload`, every
//! checksum but the raw one resealed), so nothing but the codec's own header checks stands
//! between the bytes and the decoder:
//!
//! * `ibp-columns-2e60-v1.ppk`, `ibp-columns-2e60-v2.ppk`: an IBP stream (one mask; clusters)
//!   with no rows, 2^60 columns and a raw length of 2^63: sizes computed from them wrapped,
//!   and the reader asked for 2^62 bytes (an abort) or overflowed a capacity (a panic).
//! * `rans-claims-256mib.ppk`: a valid rANS stream of 256 MiB of zeros in the entry of a
//!   4 KiB tensor: the GPU decoder sized its device buffers from the stream before comparing
//!   lengths.
//!
//! Every one must be refused as corrupt. `PLANEPACK_BLESS=1` rewrites the files.

use planepack_container::{compress, forge, CodecId, CodecSpec, CompressOptions, Container};
use planepack_container::{Error, Policy};
use planepack_core::Codec;
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/hostile")
}

/// A container of one 4 KiB F32 tensor `[64, 16]` coded with `codec`.
fn base(codec: CodecId) -> Vec<u8> {
    let json = r#"{"t":{"dtype":"F32","shape":[64,16],"data_offsets":[0,4096]}}"#;
    let mut file = (json.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(json.as_bytes());
    for i in 0..1024u32 {
        let x = (i % 16) as f32 * 0.25 - (i / 16) as f32 * 0.001;
        file.extend_from_slice(&x.to_le_bytes());
    }
    let opts = CompressOptions::new(Policy::Fixed(CodecSpec::from(codec)), "t");
    let mut out = std::io::Cursor::new(Vec::new());
    compress(file.as_slice(), &mut out, &opts, |_| {}).unwrap();
    out.into_inner()
}

/// An IBP stream header with no rows, 2^60 columns of 64 bits and a raw length of 2^63.
fn ibp_huge_columns(version: u8) -> Vec<u8> {
    let mut s = b"PPIB".to_vec();
    s.extend_from_slice(&[version, 64, if version == 2 { 2 } else { 0 }, 0]);
    s.extend_from_slice(&(1u64 << 60).to_le_bytes());
    s.extend_from_slice(&0u64.to_le_bytes());
    s.extend_from_slice(&(1u64 << 63).to_le_bytes());
    s
}

fn fixtures() -> Vec<(&'static str, Vec<u8>)> {
    let zeros = vec![0u8; 256 << 20];
    let rans = planepack_rans::Rans::default()
        .encode_to_vec(&zeros, planepack_core::ElemType::F32)
        .unwrap();
    drop(zeros);
    vec![
        (
            "ibp-columns-2e60-v1.ppk",
            forge::with_payload(&base(CodecId::Ibp), 0, &ibp_huge_columns(1)).unwrap(),
        ),
        (
            "ibp-columns-2e60-v2.ppk",
            forge::with_payload(&base(CodecId::IbpClusters), 0, &ibp_huge_columns(2)).unwrap(),
        ),
        (
            "rans-claims-256mib.ppk",
            forge::with_payload(&base(CodecId::Rans), 0, &rans).unwrap(),
        ),
    ]
}

#[test]
fn hostile_fixtures_are_current_and_refused_as_corrupt() {
    let bless = std::env::var_os("PLANEPACK_BLESS").is_some();
    for (name, bytes) in fixtures() {
        let path = dir().join(name);
        if bless {
            std::fs::create_dir_all(dir()).unwrap();
            std::fs::write(&path, &bytes).unwrap();
        }
        let committed = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (PLANEPACK_BLESS=1 writes it)", path.display()));
        assert!(
            committed == bytes,
            "{name} is stale (PLANEPACK_BLESS=1 rewrites it)"
        );
        let c = Container::parse(bytes.as_slice(), "t").expect("the metadata is valid");
        for r in [c.verify(), c.read(0).map(|_| ())] {
            match r {
                Err(Error::Corrupt(m)) => assert!(m.contains("\"t\""), "{name}: {m}"),
                other => panic!("{name}: {other:?}"),
            }
        }
    }
}

/// An engine whose kernels panic (standing in for a codec bug).
#[derive(Debug, Default)]
struct Panicking(planepack_container::EngineCounts);

impl planepack_container::Engine for Panicking {
    fn encode(
        &self,
        _: CodecSpec,
        _: &[u8],
        _: planepack_core::ElemType,
        _: &[usize],
        _: &mut Vec<u8>,
    ) -> Option<planepack_core::Result<()>> {
        panic!("encoder bug")
    }
    fn decode(&self, _: CodecSpec, _: &[u8], _: &mut [u8]) -> Option<planepack_core::Result<()>> {
        panic!("decoder bug")
    }
    fn counts(&self) -> &planepack_container::EngineCounts {
        &self.0
    }
}

/// A codec that panics is reported as an internal error naming the tensor, on both sides, and
/// the panic goes no further (the command exits 1, Python raises `InternalError`).
#[test]
fn a_panicking_codec_is_an_internal_error_naming_the_tensor() {
    let file = base(CodecId::Rans);
    let mut c = Container::parse(file.as_slice(), "t").unwrap();
    c.set_engine(Some(std::sync::Arc::new(Panicking::default())));
    match c.read(0) {
        Err(Error::Internal(m)) => assert!(m.contains("\"t\"") && m.contains("decoder bug"), "{m}"),
        other => panic!("{other:?}"),
    }
    let json = r#"{"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#;
    let mut input = (json.len() as u64).to_le_bytes().to_vec();
    input.extend_from_slice(json.as_bytes());
    input.extend_from_slice(&[0u8; 16]);
    let mut opts = CompressOptions::new(Policy::BestRatio, "t");
    opts.engine = Some(std::sync::Arc::new(Panicking::default()));
    let mut out = std::io::Cursor::new(Vec::new());
    match compress(input.as_slice(), &mut out, &opts, |_| {}) {
        Err(Error::Internal(m)) => assert!(m.contains("\"t\"") && m.contains("encoder bug"), "{m}"),
        other => panic!("{:?}", other.map(|_| ())),
    }
}
