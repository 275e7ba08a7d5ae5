//! The tensor-file reader on untrusted bytes: `planepack-tensorfile`, the one parser of
//! safetensors and `.npy` headers that `compress`, `bench`, the harness and the Python package
//! all use. It must never panic or hang, every tensor it describes must lie inside the file,
//! and the preamble it measures must be the one it parses.
#![no_main]

use libfuzzer_sys::fuzz_target;
use planepack_tensorfile::{Source, PROBE_LEN};

fuzz_target!(|data: &[u8]| {
    let whole = Source::parse_bytes(data, "x");
    let head = &data[..data.len().min(PROBE_LEN)];
    if let Ok((kind, preamble_len)) = Source::preamble_len_of(head, data.len() as u64) {
        let preamble = &data[..preamble_len as usize];
        let parsed = Source::parse(kind, preamble, data.len() as u64, "x");
        assert_eq!(parsed.is_ok(), whole.is_ok(), "two ways to parse disagree");
        if let Ok(src) = parsed {
            let mut end = preamble_len;
            for t in &src.tensors {
                assert!(t.offset >= end, "tensors overlap or precede the data");
                end = t.offset.checked_add(t.len).expect("in the file");
                assert!(end <= data.len() as u64);
            }
            assert_eq!(end, data.len() as u64, "the data region is covered");
        }
    } else {
        assert!(whole.is_err());
    }
});
