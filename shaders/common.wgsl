// Shared by the decoder kernels: the bounds-checked read of the compressed stream. Each kernel
// declares `stream` (binding 0) and `status` itself; this file is put in front of it. The error
// bits they report in `status[0]` (ERR_*), the bit-plane mode tags (MODE_*) and the table entry
// layout are generated in front of this file from the Rust definitions
// (crates/planepack-gpu/src/contract.rs), so they are never restated here.

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
