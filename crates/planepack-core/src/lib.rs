//! The shared vocabulary of planepack.
//!
//! Every codec crate (bit-plane, IBP, the baselines) and every consumer (harness, GPU runtime,
//! CLI) speaks through the types defined here, so that a codec can be swapped for another
//! without the caller knowing which one it holds:
//!
//! * [`ElemType`]: what the bytes of a tensor are. Codecs only ever look at raw bit patterns;
//!   the element type tells them the width, nothing more.
//! * [`Codec`]: encode into a growable buffer, decode into the caller's buffer, bound the
//!   worst case. Decoders take untrusted bytes and answer with [`Error`], never a panic.
//! * [`bitio`]: LSB-first bit writer and reader used by the hand-written formats.
//! * [`transpose`]: bit-matrix transposes (element bits to bit planes and back), shared by the
//!   bit-plane codec and the bit-shuffle baseline.
//! * [`transfer`]: the link cost model of PlaneZip's equation (2).
//! * [`cpu`]: which instruction-set tier the SIMD paths may use (decided once, for all crates).
//! * [`scratch`]: coding buffers a thread keeps from one call to the next.

pub mod bitio;
pub mod codec;
pub mod cpu;
pub mod elem;
pub mod error;
pub mod scratch;
pub mod stats;
pub mod transfer;
pub mod transpose;

pub use codec::Codec;
pub use elem::ElemType;
pub use error::{Error, Result};

/// `fn $name(args) -> R` that runs `$portable(args)` compiled a second time with AVX2 where
/// the CPU has it (x86-64-v3, checked at run time), else as built. For loops written to
/// vectorise: the crates are built for any x86-64 CPU, whose 16-byte vectors were a sixth of
/// encoding FP32 tensors in rANS's plane split. `$portable` should be `#[inline(always)]`, so
/// that its body is compiled inside the AVX2 function.
#[macro_export]
macro_rules! with_avx2 {
    ($(#[$doc:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? = $portable:path;) => {
        $(#[$doc])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            if $crate::cpu::x86_64_v3() {
                #[target_feature(enable = "avx2")]
                unsafe fn avx2($($arg: $ty),*) $(-> $ret)? {
                    $portable($($arg),*)
                }
                // SAFETY: the CPU has AVX2 (checked just above).
                return unsafe { avx2($($arg),*) };
            }
            $portable($($arg),*)
        }
    };
}
