//! decode(encode(x)) == x for every codec, element type and (for the codecs that take one) row
//! shape, and the parallel encoder's bytes equal the serial one's: the first byte picks the
//! codec, the second the element type and a row length; the rest is the tensor's bytes (any
//! length, so every tail is reached).
#![no_main]

use libfuzzer_sys::fuzz_target;
use planepack_container::{CodecId, CodecSpec};
use planepack_core::{Codec, ElemType};

fuzz_target!(|data: &[u8]| {
    let [pick, shape, input @ ..] = data else {
        return;
    };
    let id = CodecId::ALL[*pick as usize % CodecId::ALL.len()];
    let codec = CodecSpec::from(id).codec();
    let elem = [ElemType::U8, ElemType::BF16, ElemType::F16, ElemType::F32][(*shape & 3) as usize];
    // A row of `cols` elements when it divides the input (shaped encoders: IBP rows, the rANS
    // row map and row planes), else one dimension.
    let cols = 1 + (*shape >> 2) as usize;
    let n = input.len() / elem.size();
    let dims = if n > 0 && n % cols == 0 && n / cols > 1 {
        vec![n / cols, cols]
    } else {
        vec![n]
    };
    check(&*codec, input, elem, &dims);
    // rANS without the difference chunks (on in the default encoder) round-trips too: the
    // planes it then writes are not the default's.
    if id == CodecId::Rans {
        let diff = planepack_rans::Rans {
            differences: false,
            ..planepack_rans::Rans::default()
        };
        check(&diff, input, elem, &dims);
        // `rans-1`: the shortest of the chunk sizes it tries, within its own bound.
        let search = CodecSpec { id, level: 1 }.codec();
        check(&*search, input, elem, &dims);
    }
});

fn check(codec: &dyn Codec, input: &[u8], elem: ElemType, dims: &[usize]) {
    let mut enc = Vec::new();
    if codec.encode_shaped(input, elem, dims, &mut enc).is_err() {
        // Only a tensor a codec cannot take (e.g. not whole elements for some) may fail.
        return;
    }
    assert!(
        enc.len() <= codec.max_compressed_len(input.len(), elem),
        "{}: output over its own bound",
        codec.name()
    );
    // The parallel encoder (rans, bit-plane: chunks over rayon) writes the serial one's bytes.
    let mut par = Vec::new();
    codec
        .encode_shaped_parallel(input, elem, dims, &mut par)
        .expect("the parallel encoder takes what the serial one took");
    assert!(par == enc, "{}: the parallel encoder wrote other bytes", codec.name());
    let mut out = vec![0u8; input.len()];
    codec.decode(&enc, &mut out).expect("decodes what it encoded");
    assert!(out == input, "{} does not round-trip", codec.name());
    assert_eq!(codec.decoded_len(&enc).ok(), Some(input.len()));
}
