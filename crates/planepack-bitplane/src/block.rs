//! One 128-byte block: choosing its mode, sizing it, writing and reading its payload.
//!
//! The encoder builds a `Plan` for every candidate mode it can afford to size, keeps the
//! smallest, and writes it at once (the chunk starts the payloads behind the room its block
//! table takes, and fills the table in at the end).
//! Ties go to the mode that is cheapest to decode, in the order of [`Mode::TIE_ORDER`].

use crate::geometry::{Geometry, Plane, BLOCK_BYTES};
use crate::symbols::{decode_base, encode_base, encode_planes, Count};
use planepack_core::bitio::{BitReader, SliceBitWriter};
use planepack_core::cpu;

/// Bits of a RAW payload.
pub const RAW_BITS: u32 = (BLOCK_BYTES * 8) as u32;

/// The coding mode of one block, as stored in its 3-bit tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Mode {
    /// The 128 bytes verbatim.
    Raw = 0,
    /// Nonzero mask, then the nonzero elements verbatim.
    Zvc = 1,
    /// Bit planes of the elements, XOR-ed with the plane above, symbol coded.
    Bx = 2,
    /// Base element, then bit planes of the wrap-around deltas, XOR-ed, symbol coded.
    Dbx = 3,
    /// Nonzero mask, then BX over the packed nonzero elements (at least two).
    Zbx = 4,
    /// Every element zero; no payload. (A planepack extension; PlaneZip has five modes.)
    Zero = 5,
}

impl Mode {
    /// All modes, indexed by tag.
    pub const ALL: [Mode; 6] = [
        Mode::Raw,
        Mode::Zvc,
        Mode::Bx,
        Mode::Dbx,
        Mode::Zbx,
        Mode::Zero,
    ];
    /// Candidate order: on equal size, the earlier (cheaper to decode) mode wins.
    pub const TIE_ORDER: [Mode; 6] = [
        Mode::Zero,
        Mode::Raw,
        Mode::Zvc,
        Mode::Bx,
        Mode::Zbx,
        Mode::Dbx,
    ];

    /// The mode stored under `tag`, if any (tags 6 and 7 are reserved).
    pub fn from_tag(tag: u64) -> Option<Mode> {
        Mode::ALL.get(tag as usize).copied()
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Raw => "RAW",
            Mode::Zvc => "ZVC",
            Mode::Bx => "BX",
            Mode::Dbx => "DBX",
            Mode::Zbx => "ZBX",
            Mode::Zero => "ZERO",
        }
    }
}

/// The chosen coding of one block, ready to be written.
#[derive(Clone, Copy)]
pub(crate) struct Plan<G: Geometry> {
    pub mode: Mode,
    /// Payload bits (exact).
    pub bits: u32,
    mask: G::Plane,
    planes: G::Planes,
    /// Significant bits per plane (BX: N, DBX: N-1, ZBX: nonzero count).
    p_bits: u32,
    base: u64,
}

/// Plan the smallest coding of one block. `forced` restricts the choice to one mode (tests);
/// a forced mode that does not apply (ZERO on nonzero data, ZBX with fewer than two nonzeros)
/// falls back to the normal choice.
#[inline(always)]
pub(crate) fn plan<G: Geometry, const T: u8>(
    block: &[u8; BLOCK_BYTES],
    forced: Option<Mode>,
) -> Plan<G> {
    let elems = G::load(block);
    let e = elems.as_ref();
    // The planes BX codes, and the nonzero mask (bit `i` set in some plane exactly when
    // element `i` is nonzero: their OR, or at the AVX2 tier compares, `crate::nonzero`).
    let bx_planes = to_planes::<G, T>(&elems);
    // SAFETY: the CPU runs tier `T` (see `to_planes` below).
    let mask = unsafe { G::nonzero_at::<T>(&elems, &bx_planes) };
    let k = mask.count_ones();
    let n = G::N as u32;
    let mut best = Plan::<G> {
        mode: Mode::Raw,
        bits: RAW_BITS,
        mask,
        planes: G::zero_planes(),
        p_bits: 0,
        base: 0,
    };
    // Only the forced mode is sized when one is given; it replaces RAW whenever it fits.
    let allowed = |m: Mode| forced.is_none_or(|f| f == m);
    // Every non-RAW payload must stay under RAW_BITS: its length field has 10 bits.
    let take = |bits: u32, best: u32| bits < RAW_BITS && (forced.is_some() || bits < best);
    if k == 0 && allowed(Mode::Zero) {
        best.mode = Mode::Zero;
        best.bits = 0;
        return best;
    }
    // DBX's planes below the AVX-512 tier (`crate::delta`), made before the
    // other trials: where the ripple stores them a plane at a time (16-bit planes), DBX's
    // vector sizer must wait until those stores reach the cache; with BX's and ZBX's trials
    // between, the wait is hidden (FP32 encode +5 % at the AVX2 tier, with the ripple).
    // SAFETY: the CPU runs tier `T` (see `to_planes` below).
    let dbx_planes = (T < cpu::AVX512 && allowed(Mode::Dbx))
        .then(|| unsafe { G::delta_planes_at::<T>(&bx_planes) });
    let zvc = n + k * G::W;
    if allowed(Mode::Zvc) && take(zvc, best.bits) {
        best.mode = Mode::Zvc;
        best.bits = zvc;
    }
    if allowed(Mode::Bx) {
        let planes = bx_planes;
        let c = planes_size::<G, T>(planes.as_ref(), n);
        if take(c, best.bits) {
            best.mode = Mode::Bx;
            best.bits = c;
            best.planes = planes;
            best.p_bits = n;
        }
    }
    if k >= 2 && (k < n || forced.is_some()) && allowed(Mode::Zbx) {
        let mut packed = G::zero_elems();
        // Branch-free compaction: every element is stored, only nonzeros advance the cursor.
        let mut j = 0;
        for &x in e {
            packed.as_mut()[j.min(G::N - 1)] = x;
            j += (x.into() != 0) as usize;
        }
        let planes = to_planes::<G, T>(&packed);
        let c = n + planes_size::<G, T>(planes.as_ref(), k);
        if take(c, best.bits) {
            best.mode = Mode::Zbx;
            best.bits = c;
            best.planes = planes;
            best.p_bits = k;
        }
    }
    if allowed(Mode::Dbx) {
        // AVX-512 transposes with one GF(2) affine instruction, cheaper there than the borrow
        // ripple through 32 FP32 planes; everywhere else the planes' subtraction (above) is
        // cheaper.
        let planes = dbx_planes.unwrap_or_else(|| to_planes::<G, T>(&deltas::<G>(&elems)));
        let base = e[0].into();
        let mut c = Count::default();
        encode_base(base, G::W, &mut c);
        let c = c.0 + planes_size::<G, T>(planes.as_ref(), n - 1);
        if take(c, best.bits) {
            best.mode = Mode::Dbx;
            best.bits = c;
            best.planes = planes;
            best.p_bits = n - 1;
            best.base = base;
        }
    }
    best
}

/// DBX's elements: `e[i + 1] - e[i]` (wrapping, `W` bits), zero for the last element.
#[inline(always)]
fn deltas<G: Geometry>(elems: &G::Elems) -> G::Elems {
    let e = elems.as_ref();
    let mut deltas = G::zero_elems();
    for i in 0..G::N - 1 {
        deltas.as_mut()[i] = G::elem(e[i + 1].into().wrapping_sub(e[i].into()));
    }
    deltas
}

/// Write the payload of a planned block.
#[inline(always)]
pub(crate) fn write<G: Geometry, B: AsMut<[u8]> + ?Sized>(
    plan: &Plan<G>,
    block: &[u8; BLOCK_BYTES],
    w: &mut SliceBitWriter<B>,
) {
    match plan.mode {
        Mode::Zero => {}
        Mode::Raw => {
            for word in block.chunks_exact(8) {
                w.put_wide(u64::from_le_bytes(word.try_into().unwrap()) as u128, 64);
            }
        }
        Mode::Zvc => {
            plan.mask.put(w, G::N as u32);
            for &x in G::load(block).as_ref() {
                let v = x.into();
                if v != 0 {
                    w.put(v, G::W);
                }
            }
        }
        Mode::Bx => encode_planes(plan.planes.as_ref(), plan.p_bits, w),
        Mode::Zbx => {
            plan.mask.put(w, G::N as u32);
            encode_planes(plan.planes.as_ref(), plan.p_bits, w);
        }
        Mode::Dbx => {
            encode_base(plan.base, G::W, w);
            encode_planes(plan.planes.as_ref(), plan.p_bits, w);
        }
    }
}

/// A block whose prefix has been read: either finished, or waiting for its planes.
pub(crate) enum Pending<G: Geometry> {
    Done,
    Bx,
    Dbx { base: u64 },
    Zbx { mask: G::Plane },
}

// By hand: the derives would ask `G` itself to be `Copy`.
impl<G: Geometry> Clone for Pending<G> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<G: Geometry> Copy for Pending<G> {}

impl<G: Geometry> Pending<G> {
    /// Significant bits per plane, if planes follow.
    #[inline(always)]
    pub fn p_bits(&self) -> Option<u32> {
        match self {
            Pending::Done => None,
            Pending::Bx => Some(G::N as u32),
            Pending::Dbx { .. } => Some(G::N as u32 - 1),
            Pending::Zbx { mask } => Some(mask.count_ones()),
        }
    }
}

/// Read the part of a block that precedes its planes. RAW, ZERO and ZVC blocks are decoded
/// completely here; BX, DBX and ZBX blocks continue with their planes and [`finish`].
#[inline(always)]
pub(crate) fn begin<G: Geometry>(
    mode: Mode,
    r: &mut BitReader,
    out: &mut [u8; BLOCK_BYTES],
) -> Result<Pending<G>, &'static str> {
    Ok(match mode {
        Mode::Zero => {
            out.fill(0);
            Pending::Done
        }
        Mode::Raw => {
            for word in out.chunks_exact_mut(8) {
                word.copy_from_slice(&r.read_u64(64).to_le_bytes());
            }
            Pending::Done
        }
        Mode::Zvc => {
            let mask = G::Plane::get(r, G::N as u32);
            let mut elems = G::zero_elems();
            let mut m = mask;
            while m != G::Plane::ZERO {
                let i = m.trailing_zeros() as usize;
                m = m & !(G::Plane::ONE << i as u32);
                let v = r.read(G::W);
                if v == 0 {
                    return Err("ZVC element marked nonzero is zero");
                }
                elems.as_mut()[i] = G::elem(v);
            }
            G::store(&elems, out);
            Pending::Done
        }
        Mode::Bx => Pending::Bx,
        Mode::Zbx => {
            let mask = G::Plane::get(r, G::N as u32);
            if mask.count_ones() < 2 {
                return Err("ZBX block with fewer than two nonzero elements");
            }
            Pending::Zbx { mask }
        }
        Mode::Dbx => Pending::Dbx {
            base: decode_base(r, G::W)?,
        },
    })
}

// Tier `T` (`planepack_core::cpu`) below: `plan` and `finish` are instantiated with a tier
// above the portable one only inside that tier's `#[target_feature]` chunk coders in
// `crate::simd`, which run only after `planepack_core::cpu` said the CPU runs the tier. That is
// what every `unsafe` call here relies on.

/// [`Geometry::to_planes_at`] for tier `T`.
#[inline(always)]
fn to_planes<G: Geometry, const T: u8>(elems: &G::Elems) -> G::Planes {
    // SAFETY: the CPU runs tier `T` (see above).
    unsafe { G::to_planes_at::<T>(elems) }
}

/// [`Geometry::from_planes_at`] for tier `T`.
#[inline(always)]
fn from_planes<G: Geometry, const T: u8>(planes: &G::Planes) -> G::Elems {
    // SAFETY: the CPU runs tier `T` (see above).
    unsafe { G::from_planes_at::<T>(planes) }
}

/// [`crate::geometry::Plane::planes_size_at`] for tier `T`.
#[inline(always)]
fn planes_size<G: Geometry, const T: u8>(planes: &[G::Plane], p_bits: u32) -> u32 {
    // SAFETY: the CPU runs tier `T` (see above).
    unsafe { <G::Plane as crate::geometry::Plane>::planes_size_at::<T>(planes, p_bits) }
}

/// Turn decoded planes back into the block's bytes, with tier `T`'s instructions.
#[inline(always)]
pub(crate) fn finish<G: Geometry, const T: u8>(
    pending: Pending<G>,
    planes: &G::Planes,
    out: &mut [u8; BLOCK_BYTES],
) -> Result<(), &'static str> {
    let from_planes = from_planes::<G, T>;
    match pending {
        Pending::Done => {}
        Pending::Bx => G::store(&from_planes(planes), out),
        Pending::Zbx { mask } => {
            let packed = from_planes(planes);
            // The first `k` packed elements are the nonzeros; none may be zero.
            let k = mask.count_ones() as usize;
            let zero = packed.as_ref()[..k]
                .iter()
                .fold(false, |z, &v| z | (v.into() == 0));
            if zero {
                return Err("ZBX element marked nonzero is zero");
            }
            // SAFETY: the CPU runs tier `T` (see above).
            G::store(&unsafe { G::expand_at::<T>(mask, &packed) }, out);
        }
        Pending::Dbx { base } => {
            let deltas = from_planes(planes);
            // SAFETY: the CPU runs tier `T` (see above).
            G::store(&unsafe { G::accumulate_at::<T>(base, &deltas) }, out);
        }
    }
    Ok(())
}

/// Payload bits a ZVC block must have, given its mask (read at the block's start).
#[inline(always)]
pub(crate) fn zvc_bits<G: Geometry>(r: &BitReader) -> u32 {
    let mut peek = r.clone();
    let mask = G::Plane::get(&mut peek, G::N as u32);
    G::N as u32 + mask.count_ones() * G::W
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::{W16, W32, W8};

    /// The planes' subtraction against the elements' differences transposed, at every width,
    /// on blocks with small steps (the borrow runs far) and with extreme values.
    fn deltas_agree<G: Geometry>() {
        let mut rng = planepack_testkit::Rng(11);
        for round in 0..2000 {
            let mut bytes = [0u8; BLOCK_BYTES];
            match round % 3 {
                0 => bytes.iter_mut().for_each(|b| *b = rng.next_u64() as u8),
                1 => bytes
                    .iter_mut()
                    .for_each(|b| *b = [0, 0xFF, 0x80, 1][rng.below(4) as usize]),
                _ => bytes
                    .iter_mut()
                    .for_each(|b| *b = (rng.below(3) as u8).wrapping_sub(1)),
            }
            let e = G::load(&bytes);
            let planes = to_planes::<G, { cpu::PORTABLE }>(&e);
            let expect = to_planes::<G, { cpu::PORTABLE }>(&deltas::<G>(&e));
            assert!(
                crate::delta::delta_planes::<G>(&planes).as_ref() == expect.as_ref(),
                "width {}",
                G::W
            );
        }
    }

    #[test]
    fn delta_planes_match_the_transposed_differences() {
        deltas_agree::<W8>();
        deltas_agree::<W16>();
        deltas_agree::<W32>();
    }
}
