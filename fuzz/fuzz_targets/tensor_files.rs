//! The tensor-file parsers on untrusted bytes: the safetensors and `.npy` parsers of
//! `planepack-datasets` (what `planepack bench` reads) and the container's source parser
//! (what `compress` reads), which must never panic, and must agree on what a valid file
//! holds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use planepack_container::source::{Source, PROBE_LEN};
use planepack_datasets::{parse_npy, parse_safetensors};

fuzz_target!(|data: &[u8]| {
    let st = parse_safetensors(data);
    let npy = parse_npy(data, "x".into());
    let head = &data[..data.len().min(PROBE_LEN)];
    if let Ok((kind, preamble_len)) = Source::preamble_len_of(head, data.len() as u64) {
        if let Some(preamble) = usize::try_from(preamble_len).ok().and_then(|p| data.get(..p)) {
            if let Ok(src) = Source::parse(kind, preamble, data.len() as u64, "x") {
                // Every span the container would compress lies inside the file, and a file
                // the loaders accept has the same tensors at the same places.
                for t in &src.tensors {
                    assert!(t.offset.checked_add(t.len).is_some_and(|e| e <= data.len() as u64));
                }
                let loaded = st.ok().or_else(|| npy.ok().map(|t| vec![t]));
                if let Some(tensors) = loaded {
                    assert_eq!(tensors.len(), src.tensors.len());
                }
            }
        }
    }
});
