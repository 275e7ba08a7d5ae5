//! Bit extract/deposit and MSB-first word streams, the two primitives of IBP rows.
//!
//! A participating chunk stores `pext(x, !mask)`: the bits of `x` where the mask is clear,
//! packed. Decoding is `bitval | pdep(field, !mask)`. x86_64 CPUs with BMI2 do each in one
//! instruction; elsewhere (and with `PLANEPACK_NO_SIMD=1`) a loop over the runs of set bits
//! of the selector does the same, as the reference GPU decoder does with `clz`. Both give
//! identical results; the tests compare them on random words.
//!
//! The packed fields form a bit stream cut into `W`-bit words, each filled from its most
//! significant bit down and stored little-endian (the reference format's order).

/// `W` low bits set.
#[inline(always)]
pub fn ones(w: u32) -> u64 {
    if w >= 64 {
        u64::MAX
    } else {
        (1u64 << w) - 1
    }
}

/// Portable parallel bit extract: the bits of `x` selected by `m`, packed at the bottom.
#[inline]
pub fn pext_portable(x: u64, m: u64) -> u64 {
    let (mut m, mut r, mut k) = (m, 0u64, 0u32);
    while m != 0 {
        let t = m.trailing_zeros();
        let run = (!(m >> t)).trailing_zeros();
        r |= ((x >> t) & ones(run)) << k;
        k += run;
        m &= !(ones(run) << t);
    }
    r
}

/// Portable parallel bit deposit: the low bits of `x` spread to the positions set in `m`.
#[inline]
pub fn pdep_portable(x: u64, m: u64) -> u64 {
    let (mut m, mut r, mut k) = (m, 0u64, 0u32);
    while m != 0 {
        let t = m.trailing_zeros();
        let run = (!(m >> t)).trailing_zeros();
        r |= ((x >> k) & ones(run)) << t;
        k += run;
        m &= !(ones(run) << t);
    }
    r
}

/// Which implementation of pext/pdep a [`crate::Columns`] uses: a token only CPU detection can
/// make for the BMI2 instructions, so no caller can select them on a CPU without BMI2 (the
/// decoders execute them unchecked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BitOps {
    bmi2: bool,
}

impl BitOps {
    /// BMI2 where the x86-64-v3 tier runs ([`planepack_core::cpu::x86_64_v3`]), else portable.
    pub fn detect() -> BitOps {
        BitOps {
            bmi2: cfg!(target_arch = "x86_64") && planepack_core::cpu::x86_64_v3(),
        }
    }

    /// The portable loops, on any CPU (tests compare both).
    pub const fn portable() -> BitOps {
        BitOps { bmi2: false }
    }

    /// Does this token select the BMI2 instructions (only ever true on a CPU that has them)?
    pub const fn is_bmi2(self) -> bool {
        self.bmi2
    }

    /// `pext(x, m)` by this token's implementation.
    #[inline(always)]
    pub fn pext(self, x: u64, m: u64) -> u64 {
        #[cfg(target_arch = "x86_64")]
        if self.bmi2 {
            // SAFETY: a BMI2 token is only made by `detect` on a CPU with BMI2.
            return unsafe { bmi2::pext(x, m) };
        }
        pext_portable(x, m)
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod bmi2 {
    /// `pext` instruction.
    ///
    /// # Safety
    /// The CPU must support BMI2 (see [`super::BitOps::detect`]).
    #[inline]
    #[target_feature(enable = "bmi2")]
    pub fn pext(x: u64, m: u64) -> u64 {
        core::arch::x86_64::_pext_u64(x, m)
    }

    /// `pdep` instruction.
    ///
    /// # Safety
    /// The CPU must support BMI2 (see [`super::BitOps::detect`]).
    #[inline]
    #[target_feature(enable = "bmi2")]
    pub fn pdep(x: u64, m: u64) -> u64 {
        core::arch::x86_64::_pdep_u64(x, m)
    }
}

/// Writes fields MSB-first into `W`-bit words stored little-endian.
pub struct WordWriter<'a> {
    out: &'a mut [u8],
    pos: usize,
    width: u32,
    acc: u128,
    nbits: u32,
}

impl<'a> WordWriter<'a> {
    pub fn new(out: &'a mut [u8], width: u32) -> Self {
        WordWriter {
            out,
            pos: 0,
            width,
            acc: 0,
            nbits: 0,
        }
    }

    /// Append the low `n <= 64` bits of `v` (higher bits must be zero).
    #[inline(always)]
    pub fn push(&mut self, v: u64, n: u32) {
        if n == 0 {
            return;
        }
        self.acc = (self.acc << n) | v as u128;
        self.nbits += n;
        while self.nbits >= self.width {
            let word = (self.acc >> (self.nbits - self.width)) as u64 & ones(self.width);
            self.emit(word);
            self.nbits -= self.width;
        }
    }

    #[inline(always)]
    fn emit(&mut self, word: u64) {
        let b = (self.width / 8) as usize;
        self.out[self.pos..self.pos + b].copy_from_slice(&word.to_le_bytes()[..b]);
        self.pos += b;
    }

    /// Flush the last partial word (zero padded); returns bytes written.
    pub fn finish(mut self) -> usize {
        if self.nbits > 0 {
            let word = ((self.acc << (self.width - self.nbits)) as u64) & ones(self.width);
            self.emit(word);
        }
        self.pos
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Independent reader of the word stream, the writer's test oracle (the row decoder in
    /// `row.rs` has its own width-specialised reader).
    /// Reads fields MSB-first from `W`-bit little-endian words. Past the end it reads zeros and
    /// sets [`WordReader::overran`].
    struct WordReader<'a> {
        data: &'a [u8],
        pos: usize,
        width: u32,
        acc: u128,
        avail: u32,
        overran: bool,
    }

    impl<'a> WordReader<'a> {
        fn new(data: &'a [u8], width: u32) -> Self {
            WordReader {
                data,
                pos: 0,
                width,
                acc: 0,
                avail: 0,
                overran: false,
            }
        }

        #[inline(always)]
        fn refill(&mut self) {
            let b = (self.width / 8) as usize;
            let word = match self.data.get(self.pos..self.pos + b) {
                Some(bytes) => crate::row::le_word(bytes),
                None => {
                    self.overran = true;
                    0
                }
            };
            self.pos += b;
            self.acc = (self.acc << self.width) | word as u128;
            self.avail += self.width;
        }

        /// Read `n <= 64` bits.
        #[inline(always)]
        fn read(&mut self, n: u32) -> u64 {
            if n == 0 {
                return 0;
            }
            while self.avail < n {
                self.refill();
            }
            self.avail -= n;
            let v = (self.acc >> self.avail) as u64 & ones(n);
            self.acc &= (1u128 << self.avail) - 1;
            v
        }

        fn overran(&self) -> bool {
            self.overran
        }
    }
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn pext_pdep_portable_agree_with_definition(x in any::<u64>(), m in any::<u64>()) {
            let mut want = 0u64;
            let mut k = 0;
            for b in 0..64 {
                if m >> b & 1 == 1 {
                    want |= (x >> b & 1) << k;
                    k += 1;
                }
            }
            prop_assert_eq!(pext_portable(x, m), want);
            prop_assert_eq!(pdep_portable(pext_portable(x, m), m), x & m);
            #[cfg(target_arch = "x86_64")]
            if is_x86_feature_detected!("bmi2") {
                // SAFETY: checked just above.
                unsafe {
                    prop_assert_eq!(bmi2::pext(x, m), want);
                    prop_assert_eq!(bmi2::pdep(want, m), x & m);
                }
            }
        }

        #[test]
        fn words_round_trip(fields in proptest::collection::vec((any::<u64>(), 0u32..=64), 0..50), w in prop_oneof![Just(16u32), Just(32), Just(64)]) {
            let fields: Vec<(u64, u32)> = fields.into_iter().map(|(v, n)| (v & ones(n), n)).collect();
            let total: u32 = fields.iter().map(|f| f.1).sum();
            let mut buf = vec![0u8; (total.div_ceil(w) * w / 8) as usize];
            let mut wr = WordWriter::new(&mut buf, w);
            for &(v, n) in &fields { wr.push(v, n); }
            prop_assert_eq!(wr.finish(), buf.len());
            let mut r = WordReader::new(&buf, w);
            for &(v, n) in &fields { prop_assert_eq!(r.read(n), v); }
            prop_assert!(!r.overran());
        }
    }
}
