//! Block geometry per element width: how 128 bytes become elements and bit planes.
//!
//! A block is always 128 bytes = 1024 bits. With `W`-bit elements it holds `N = 1024 / W`
//! elements and, transposed, `W` planes of `N` bits. The three widths get their own types so
//! that planes live in a machine word (`u32` for FP32, `u64` for 16-bit types, `u128` for
//! 8-bit types) and the hot loops compile to plain integer code; the coding logic in
//! [`crate::symbols`] and [`crate::block`] is written once, generic over [`Geometry`].

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
    fn put(self, w: &mut SliceBitWriter, n: u32);
    fn get(r: &mut BitReader, n: u32) -> Self;
    /// The low bits of a peeked word.
    fn from_u64(v: u64) -> Self;
    /// The low 64 bits.
    fn low_u64(self) -> u64;
    /// The coded size of `planes` ([`crate::symbols::planes_size`]; a vector version where
    /// there is one).
    fn planes_size(planes: &[Self], p_bits: u32) -> u32;
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
            fn put(self, w: &mut SliceBitWriter, n: u32) {
                w.$write(self as $wide, n)
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
            fn planes_size(planes: &[Self], p_bits: u32) -> u32 {
                $size(planes, p_bits)
            }
        }
    };
}
impl_plane!(u32, put_u64, read, u64, crate::symbols::planes_size32);
impl_plane!(u64, put_u64, read_u64, u64, crate::symbols::planes_size64);
impl_plane!(
    u128,
    put_u128,
    read_u128,
    u128,
    crate::symbols::planes_size::<u128>
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
    fn to_planes(elems: &Self::Elems) -> Self::Planes;
    fn from_planes(planes: &Self::Planes) -> Self::Elems;
    /// [`Geometry::to_planes`] by the AVX-512 GFNI transpose (see the next).
    ///
    /// # Safety
    /// On x86_64 the CPU must have AVX-512 F/BW/VBMI and GFNI.
    unsafe fn to_planes_gfni(elems: &Self::Elems) -> Self::Planes;
    /// [`Geometry::from_planes`] by the AVX-512 GFNI transpose, called directly so that it
    /// inlines into the AVX-512 chunk decoder (through the dispatching function it stays a
    /// call). Other targets: [`Geometry::from_planes`].
    ///
    /// # Safety
    /// On x86_64 the CPU must have AVX-512 F/BW/VBMI and GFNI.
    unsafe fn from_planes_gfni(planes: &Self::Planes) -> Self::Elems;
    /// `packed[j]` to the position of the `j`-th set bit of `mask`, zeros elsewhere.
    fn expand(mask: Self::Plane, packed: &Self::Elems) -> Self::Elems;
    /// DBX's elements: `base`, then `base` plus each prefix sum of `deltas` (wrapping, `W`
    /// bits); the last delta is not used.
    fn accumulate(base: u64, deltas: &Self::Elems) -> Self::Elems;
}

macro_rules! geometry {
    (
        $name:ident,
        $w:expr,
        $elem:ty,
        $plane:ty,
        $to:path,
        $from:path,
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
            fn to_planes(elems: &Self::Elems) -> Self::Planes {
                $to(elems)
            }
            #[inline(always)]
            fn from_planes(planes: &Self::Planes) -> Self::Elems {
                $from(planes)
            }
            #[inline(always)]
            unsafe fn to_planes_gfni(elems: &Self::Elems) -> Self::Planes {
                // SAFETY: the caller upholds this function's contract: the CPU has the features it
                // is compiled for, and the arguments are as its documentation requires; every unsafe
                // operation below relies on exactly that.
                unsafe {
                    #[cfg(target_arch = "x86_64")]
                    return transpose::gfni::transpose::<{ 1024 / $w }, $w, { 1024 / $w }, $w>(
                        elems,
                    );
                    #[cfg(not(target_arch = "x86_64"))]
                    $to(elems)
                }
            }
            #[inline(always)]
            unsafe fn from_planes_gfni(planes: &Self::Planes) -> Self::Elems {
                // SAFETY: the caller upholds this function's contract: the CPU has the features it
                // is compiled for, and the arguments are as its documentation requires; every unsafe
                // operation below relies on exactly that.
                unsafe {
                    #[cfg(target_arch = "x86_64")]
                    return transpose::gfni::transpose::<$w, { 1024 / $w }, $w, { 1024 / $w }>(
                        planes,
                    );
                    #[cfg(not(target_arch = "x86_64"))]
                    $from(planes)
                }
            }
            #[inline(always)]
            fn expand(mask: $plane, packed: &Self::Elems) -> Self::Elems {
                $expand(mask, packed)
            }
            #[inline(always)]
            fn accumulate(base: u64, deltas: &Self::Elems) -> Self::Elems {
                $accumulate(base as $elem, deltas)
            }
        }
    };
}

geometry!(
    W32,
    32,
    u32,
    u32,
    transpose::planes32,
    transpose::elems32,
    crate::mode_finish::expand32,
    crate::mode_finish::accumulate32
);
geometry!(
    W16,
    16,
    u16,
    u64,
    transpose::planes16,
    transpose::elems16,
    crate::mode_finish::expand16,
    crate::mode_finish::accumulate16
);
geometry!(
    W8,
    8,
    u8,
    u128,
    transpose::planes8,
    transpose::elems8,
    crate::mode_finish::expand8,
    |base, deltas| crate::mode_finish::accumulate_portable(base, deltas, u8::wrapping_add)
);
