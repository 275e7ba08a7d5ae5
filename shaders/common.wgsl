// Shared by the decoder kernels: the error bits they report in `status[0]` (the host's
// `GpuError::Corrupt` names them) and the bounds-checked read of the compressed stream. Each
// kernel declares `stream` (binding 0) and `status` itself; this file is put in front of it.

const ERR_BOUNDS: u32 = 1u;
const ERR_OVERRUN: u32 = 2u;
const ERR_TAG: u32 = 4u;
const ERR_LENGTH: u32 = 8u;
const ERR_SYMBOL: u32 = 16u;
const ERR_VALUE: u32 = 32u;
const ERR_ROW: u32 = 64u;
const ERR_LAYOUT: u32 = 256u;

// This invocation's error bits.
var<private> err: u32;

// Word `i` of the stream; past its end, 0 and ERR_BOUNDS.
fn word(i: u32) -> u32 {
    if (i < arrayLength(&stream)) {
        return stream[i];
    }
    err = err | ERR_BOUNDS;
    return 0u;
}
