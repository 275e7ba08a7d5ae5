//! Block geometry per element width: how 128 bytes become elements and bit planes.
//!
//! A block is always 128 bytes = 1024 bits. With `W`-bit elements it holds `N = 1024 / W`
//! elements and, transposed, `W` planes of `N` bits. The three widths get their own types so
//! that planes live in a machine word (`u32` for FP32, `u64` for 16-bit types, `u128` for
//! 8-bit types) and the hot loops compile to plain integer code; the coding logic in
//! `crate::symbols` and [`crate::block`] is written once, generic over [`Geometry`].

use planepack_core::bitio::{BitReader, SliceBitWriter};
use planepack_core::transpose;
use std::ops::{BitAnd, BitOr, BitXor, Not, Shl, Shr};

/// Bytes in one block.
pub const BLOCK_BYTES: usize = 128;

/// One bit plane (or a block's zero mask): an `N`-bit word.
pub trait Plane:
    Copy
    + Eq
    + BitXor<Output = Self>
    + BitAnd<Output = Self>
    + BitOr<Output = Self>
    + Not<Output = Self>
    + Shl<u32, Output = Self>
    + Shr<u32, Output = Self>
{
    const ZERO: Self;
    const ONE: Self;
    /// Width in bits.
    const BITS: u32;
    /// The low `n` bits set (`n` up to the word width).
    fn ones(n: u32) -> Self;
    fn count_ones(self) -> u32;
    fn trailing_zeros(self) -> u32;
    /// The lowest set bit alone (zero for zero).
    fn lowest_one(self) -> Self;
    fn put<B: AsMut<[u8]> + ?Sized>(self, w: &mut SliceBitWriter<B>, n: u32);
    /// Write the raw symbol of a plane wider than 55 bits: the code bit `1`, then `p_bits`
    /// bits.
    fn put_raw_wide<B: AsMut<[u8]> + ?Sized>(self, w: &mut SliceBitWriter<B>, p_bits: u32);
    fn get(r: &mut BitReader, n: u32) -> Self;
    /// The low bits of a peeked word.
    fn from_u64(v: u64) -> Self;
    /// The low 64 bits.
    fn low_u64(self) -> u64;
    /// The coded size of `planes` (`crate::symbols::planes_size`), with tier `T`'s vector
    /// version where there is one.
    ///
    /// # Safety
    /// The CPU must run tier `T` ([`planepack_core::cpu`]).
    unsafe fn planes_size_at<const T: u8>(planes: &[Self], p_bits: u32) -> u32;
}

macro_rules! impl_plane {
    ($t:ty, $write:ident, $read:ident, $wide:ty, $size:expr) => {
        impl Plane for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            const BITS: u32 = <$t>::BITS;
            #[inline(always)]
            fn ones(n: u32) -> Self {
                if n >= <$t>::BITS {
                    <$t>::MAX
                } else {
                    (1 << n) - 1
                }
            }
            #[inline(always)]
            fn count_ones(self) -> u32 {
                <$t>::count_ones(self)
            }
            #[inline(always)]
            fn trailing_zeros(self) -> u32 {
                <$t>::trailing_zeros(self)
            }
            #[inline(always)]
            fn lowest_one(self) -> Self {
                self & self.wrapping_neg()
            }
            #[inline(always)]
            fn put<B: AsMut<[u8]> + ?Sized>(self, w: &mut SliceBitWriter<B>, n: u32) {
                w.$write(self as $wide, n)
            }
            #[inline(always)]
            fn put_raw_wide<B: AsMut<[u8]> + ?Sized>(self, w: &mut SliceBitWriter<B>, p_bits: u32) {
                if p_bits <= 119 {
                    w.put_wide(1 | (self as u128) << 1, 1 + p_bits);
                } else {
                    // Only 8-bit elements' planes are this wide.
                    w.put_wide(1 | (self as u128 & 0xFFFF_FFFF) << 1, 33);
                    w.put_u128((self as u128) >> 32, p_bits - 32);
                }
            }
            #[inline(always)]
            fn get(r: &mut BitReader, n: u32) -> Self {
                r.$read(n) as $t
            }
            #[inline(always)]
            fn from_u64(v: u64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn low_u64(self) -> u64 {
                self as u64
            }
            #[inline(always)]
            unsafe fn planes_size_at<const T: u8>(planes: &[Self], p_bits: u32) -> u32 {
                // SAFETY: the caller's guarantee, passed on.
                unsafe { $size(planes, p_bits) }
            }
        }
    };
}
impl_plane!(u32, put_u64, read, u64, crate::symbols::planes_size32::<T>);
impl_plane!(
    u64,
    put_u64,
    read_u64,
    u64,
    crate::symbols::planes_size64::<T>
);
impl_plane!(
    u128,
    put_u128,
    read_u128,
    u128,
    crate::symbols::planes_size128::<T>
);

/// The geometry of one element width.
pub trait Geometry {
    /// Bits per element.
    const W: u32;
    /// Elements per block.
    const N: usize;
    /// A plane, and the block's nonzero mask, as an `N`-bit word.
    type Plane: Plane;
    /// `[elem; N]`, elements widened to `u32`... kept at native width.
    type Elems: Copy + AsRef<[Self::Elem]> + AsMut<[Self::Elem]>;
    /// `[Plane; W]`.
    type Planes: Copy + AsRef<[Self::Plane]> + AsMut<[Self::Plane]>;
    /// The element as an unsigned integer of width `W`.
    type Elem: Copy + Eq + Into<u64>;

    fn zero_elems() -> Self::Elems;
    fn zero_planes() -> Self::Planes;
    /// Truncate to `W` bits.
    fn elem(v: u64) -> Self::Elem;
    /// Little-endian load of one block.
    fn load(bytes: &[u8; BLOCK_BYTES]) -> Self::Elems;
    /// Little-endian store of one block.
    fn store(elems: &Self::Elems, bytes: &mut [u8; BLOCK_BYTES]);
    /// Elements to planes with tier `T`'s transpose ([`planepack_core::transpose`]).
    ///
    /// # Safety
    /// The CPU must run tier `T` ([`planepack_core::cpu`]).
    unsafe fn to_planes_at<const T: u8>(elems: &Self::Elems) -> Self::Planes;
    /// Planes to elements with tier `T`'s transpose.
    ///
    /// # Safety
    /// The CPU must run tier `T`.
    unsafe fn from_planes_at<const T: u8>(planes: &Self::Planes) -> Self::Elems;
    /// The block's nonzero mask, from its elements or its planes (`crate::nonzero`), with
    /// tier `T`'s instructions.
    ///
    /// # Safety
    /// The CPU must run tier `T`.
    unsafe fn nonzero_at<const T: u8>(elems: &Self::Elems, planes: &Self::Planes) -> Self::Plane;
    /// DBX's planes from the block's planes (`crate::delta::delta_planes`; FP32 at the AVX2
    /// tier `crate::delta`'s prefix), with tier `T`'s instructions.
    ///
    /// # Safety
    /// The CPU must run tier `T`.
    unsafe fn delta_planes_at<const T: u8>(planes: &Self::Planes) -> Self::Planes;
    /// `packed[j]` to the position of the `j`-th set bit of `mask`, zeros elsewhere, with tier
    /// `T`'s instructions.
    ///
    /// # Safety
    /// The CPU must run tier `T`.
    unsafe fn expand_at<const T: u8>(mask: Self::Plane, packed: &Self::Elems) -> Self::Elems;
    /// DBX's elements: `base`, then `base` plus each prefix sum of `deltas` (wrapping, `W`
    /// bits); the last delta is not used. Tier `T`'s instructions.
    ///
    /// # Safety
    /// The CPU must run tier `T`.
    unsafe fn accumulate_at<const T: u8>(base: u64, deltas: &Self::Elems) -> Self::Elems;
}

macro_rules! geometry {
    (
        $name:ident,
        $w:expr,
        $elem:ty,
        $plane:ty,
        $to:path,
        $from:path,
        $nonzero:path,
        $delta:path,
        $expand:path,
        $accumulate:expr
    ) => {
        /// Block geometry for this element width.
        pub struct $name;
        impl Geometry for $name {
            const W: u32 = $w;
            const N: usize = 1024 / $w;
            type Plane = $plane;
            type Elems = [$elem; 1024 / $w];
            type Planes = [$plane; $w];
            type Elem = $elem;
            #[inline(always)]
            fn zero_elems() -> Self::Elems {
                [0; 1024 / $w]
            }
            #[inline(always)]
            fn zero_planes() -> Self::Planes {
                [0; $w]
            }
            #[inline(always)]
            fn elem(v: u64) -> $elem {
                v as $elem
            }
            #[inline(always)]
            fn load(bytes: &[u8; BLOCK_BYTES]) -> Self::Elems {
                let mut e = [0 as $elem; 1024 / $w];
                for (x, c) in e.iter_mut().zip(bytes.chunks_exact($w / 8)) {
                    *x = <$elem>::from_le_bytes(c.try_into().unwrap());
                }
                e
            }
            #[inline(always)]
            fn store(elems: &Self::Elems, bytes: &mut [u8; BLOCK_BYTES]) {
                for (x, c) in elems.iter().zip(bytes.chunks_exact_mut($w / 8)) {
                    c.copy_from_slice(&x.to_le_bytes());
                }
            }
            #[inline(always)]
            unsafe fn to_planes_at<const T: u8>(elems: &Self::Elems) -> Self::Planes {
                // SAFETY: the caller's guarantee, passed on.
                $to(unsafe { planepack_core::cpu::Tier::<T>::assume() }, elems)
            }
            #[inline(always)]
            unsafe fn from_planes_at<const T: u8>(planes: &Self::Planes) -> Self::Elems {
                // SAFETY: the caller's guarantee, passed on.
                $from(unsafe { planepack_core::cpu::Tier::<T>::assume() }, planes)
            }
            #[inline(always)]
            #[allow(unused_unsafe)]
            unsafe fn nonzero_at<const T: u8>(
                elems: &Self::Elems,
                planes: &Self::Planes,
            ) -> $plane {
                // SAFETY: the caller's guarantee, passed on.
                unsafe { $nonzero(elems, planes) }
            }
            #[inline(always)]
            #[allow(unused_unsafe)]
            unsafe fn delta_planes_at<const T: u8>(planes: &Self::Planes) -> Self::Planes {
                // SAFETY: the caller's guarantee, passed on.
                unsafe { $delta(planes) }
            }
            #[inline(always)]
            unsafe fn expand_at<const T: u8>(mask: $plane, packed: &Self::Elems) -> Self::Elems {
                // SAFETY: the caller's guarantee, passed on.
                unsafe { $expand(mask, packed) }
            }
            #[inline(always)]
            unsafe fn accumulate_at<const T: u8>(base: u64, deltas: &Self::Elems) -> Self::Elems {
                // SAFETY: the caller's guarantee, passed on.
                unsafe { $accumulate(base as $elem, deltas) }
            }
        }
    };
}

geometry!(
    W32,
    32,
    u32,
    u32,
    transpose::planes32_at::<T>,
    transpose::elems32_at::<T>,
    crate::nonzero::mask32::<T>,
    crate::delta::planes32::<T>,
    crate::mode_finish::expand32::<T>,
    crate::mode_finish::accumulate32::<T>
);
geometry!(
    W16,
    16,
    u16,
    u64,
    transpose::planes16_at::<T>,
    transpose::elems16_at::<T>,
    crate::nonzero::mask16::<T>,
    crate::delta::delta_planes::<W16>,
    crate::mode_finish::expand16::<T>,
    crate::mode_finish::accumulate16::<T>
);
geometry!(
    W8,
    8,
    u8,
    u128,
    transpose::planes8_at::<T>,
    transpose::elems8_at::<T>,
    crate::nonzero::mask8::<T>,
    crate::delta::delta_planes::<W8>,
    crate::mode_finish::expand8::<T>,
    crate::mode_finish::accumulate8::<T>
);

/// A block as AVX2 registers, for the tier's block functions (nonzero mask, DBX's prefix,
/// plane sizing).
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use core::arch::x86_64::*;

    /// `block`'s 128 bytes (elements or planes) as four registers, in order.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(crate) fn registers<T: Copy, const N: usize>(block: &[T; N]) -> [__m256i; 4] {
        const { assert!(size_of::<[T; N]>() == super::BLOCK_BYTES) };
        let p = block.as_ptr() as *const u8;
        // SAFETY: 32 bytes at 32k (k < 4) of the 128-byte array.
        core::array::from_fn(|k| unsafe { _mm256_loadu_si256(p.add(32 * k) as *const __m256i) })
    }
}
