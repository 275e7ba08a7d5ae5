//! Every codec's decoder on untrusted bytes: the first byte picks the codec (every container
//! codec id, at its default level), the rest is the stream. A decoder must return an error or
//! the right number of bytes; it must never panic, hang, read or write out of bounds (ASan),
//! or allocate what the stream cannot justify (libFuzzer's malloc limit). The serial and the
//! parallel decoder must agree, and a buffer of the wrong length must be refused.
#![no_main]

use libfuzzer_sys::fuzz_target;
use planepack_container::{CodecId, CodecSpec};

/// The harness's own cap on the output it allocates from a stream's claimed length.
const MAX_OUT: usize = 16 << 20;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, stream)) = data.split_first() else {
        return;
    };
    let id = CodecId::ALL[pick as usize % CodecId::ALL.len()];
    let codec = CodecSpec::from(id).codec();
    // The buffer a container entry would give: its length is the entry's, not the stream's
    // claim, so a stream claiming more than the harness can afford still reaches the decoder
    // (which once crashed parsing a 2^63-byte claim before comparing lengths).
    let n = match codec.decoded_len(stream) {
        Ok(n) if n <= MAX_OUT => n,
        _ => {
            let mut small = vec![0u8; stream.len().min(4096)];
            let _ = codec.decode(stream, &mut small);
            let _ = codec.decode_parallel(stream, &mut small);
            return;
        }
    };
    let mut out = vec![0u8; n];
    let serial = codec.decode(stream, &mut out).map(|_| out.clone());
    let mut out2 = vec![0u8; n];
    let parallel = codec.decode_parallel(stream, &mut out2).map(|_| out2);
    match (&serial, &parallel) {
        (Ok(a), Ok(b)) => assert!(a == b, "{}: serial and parallel decoders differ", codec.name()),
        (Err(_), Err(_)) => {}
        _ => panic!("{}: one decoder accepts what the other refuses", codec.name()),
    }
    let mut wrong = vec![0u8; n + 1];
    assert!(
        codec.decode(stream, &mut wrong).is_err(),
        "{}: decoded into a buffer one byte too long",
        codec.name()
    );
});
