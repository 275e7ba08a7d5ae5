//! LSB-first bit I/O for the hand-written formats.
//!
//! Bit `i` of a stream is bit `i % 8` of byte `i / 8`; a multi-bit field is stored with its
//! least significant bit first. This order makes a little-endian word load followed by a right
//! shift the whole "peek" operation, on the CPU (one unaligned `u64` load) and on the GPU (two
//! `u32` words and a funnel shift), which is why planepack uses it rather than the MSB-first
//! order of the BPC papers. Prefix codes are written in the order their bits appear in the
//! code tables: the leftmost code bit is the first bit in the stream.
//!
//! The reader never fails on a single read: past the end it yields zero bits and remembers it.
//! Callers check [`BitReader::overran`] at structure boundaries, which keeps the hot loop free of
//! error paths while still rejecting every truncated stream.

/// Writes bits LSB first into a caller's zeroed byte slice, with no branch on the data.
///
/// The hot encoders emit one field per bit plane, many of them empty; a writer that branches
/// on an empty field or a full word mispredicts on such streams. This one keeps fewer than 8
/// pending bits and stores its 64-bit accumulator after every field, so a field costs the
/// same shifts and one store whatever its length, zero included. It needs 8 bytes of slack:
/// the slice must be at least 8 bytes longer than the bytes written (16 with
/// [`SliceBitWriter::put_wide`]), and zeroed where written. Too little room panics (a slice
/// index), never writes out of bounds.
///
/// `B` is the buffer: a slice, or an array, whose length is then a constant in every bound
/// check (the bit-plane encoder writes a chunk into a fixed-size window: with the slice's
/// length loaded and compared on every field, its FP32 encode ran 3 % slower).
pub struct SliceBitWriter<'a, B: AsMut<[u8]> + ?Sized = [u8]> {
    buf: &'a mut B,
    byte: usize,
    acc: u64,
    nbits: u32,
}

impl<'a, B: AsMut<[u8]> + ?Sized> SliceBitWriter<'a, B> {
    /// Write from bit 0 of `buf` (zeroed, with 8 bytes of slack; see the type's docs).
    pub fn new(buf: &'a mut B) -> Self {
        SliceBitWriter {
            buf,
            byte: 0,
            acc: 0,
            nbits: 0,
        }
    }

    /// Write from bit `bit` of `buf`, the bits before it left as they are in the byte the
    /// writer shares with them (zero) for the caller to fill in after (by OR-ing, as the
    /// bit-plane chunk's block table is, which precedes payloads written as they are planned).
    pub fn at_bit(buf: &'a mut B, bit: usize) -> Self {
        SliceBitWriter {
            buf,
            byte: bit / 8,
            acc: 0,
            nbits: (bit % 8) as u32,
        }
    }

    /// Write the low `n <= 56` bits of `value` (higher bits must be zero).
    #[inline(always)]
    pub fn put(&mut self, value: u64, n: u32) {
        debug_assert!(n <= 56 && value >> n == 0, "{value:#x} in {n} bits");
        self.acc |= value << self.nbits;
        self.nbits += n;
        self.buf.as_mut()[self.byte..self.byte + 8].copy_from_slice(&self.acc.to_le_bytes());
        let whole = self.nbits >> 3;
        self.byte += whole as usize;
        self.acc >>= whole * 8;
        self.nbits &= 7;
    }

    /// Write the low `n <= 120` bits of `value` (higher bits must be zero) as one field: a
    /// wide field (a raw bit plane of 64 bits and its code bit) costs one accumulator update,
    /// not two. Needs 16 bytes of slack instead of 8.
    #[inline(always)]
    pub fn put_wide(&mut self, value: u128, n: u32) {
        debug_assert!(n <= 120 && value >> n == 0, "{value:#x} in {n} bits");
        let x = (value << self.nbits) | self.acc as u128;
        self.buf.as_mut()[self.byte..self.byte + 16].copy_from_slice(&x.to_le_bytes());
        self.nbits += n;
        let whole = self.nbits >> 3;
        self.byte += whole as usize;
        self.acc = (x >> (whole * 8)) as u64;
        self.nbits &= 7;
    }

    /// Write the low `n <= 64` bits of `value`.
    #[inline(always)]
    pub fn put_u64(&mut self, value: u64, n: u32) {
        if n <= 56 {
            self.put(value, n);
        } else {
            self.put(value & mask64(32), 32);
            self.put(value >> 32, n - 32);
        }
    }

    /// Write the low `n <= 128` bits of `value`.
    #[inline(always)]
    pub fn put_u128(&mut self, value: u128, n: u32) {
        if n <= 64 {
            self.put_u64(value as u64, n);
        } else {
            self.put_u64(value as u64, 64);
            self.put_u64((value >> 64) as u64, n - 64);
        }
    }

    /// Bits written so far. Every written bit is already in the slice; bits after them are
    /// still zero.
    #[inline]
    pub fn bit_len(&self) -> usize {
        self.byte * 8 + self.nbits as usize
    }
}

/// Reads bits LSB first from a byte slice. Reading past the end yields zeros and sets
/// [`BitReader::overran`].
#[derive(Clone)]
pub struct BitReader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> BitReader<'a> {
    /// Read `data` from bit 0.
    pub fn new(data: &'a [u8]) -> Self {
        BitReader { data, pos: 0 }
    }

    /// Read `data` starting at bit `pos`.
    pub fn at(data: &'a [u8], pos: usize) -> Self {
        BitReader { data, pos }
    }

    /// The current bit position.
    #[inline]
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// The bytes being read (for decoders that fetch several fields at once).
    #[inline]
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// Total bits available.
    #[inline]
    pub fn len_bits(&self) -> usize {
        self.data.len() * 8
    }

    /// True once any read went past the end of the data.
    #[inline]
    pub fn overran(&self) -> bool {
        self.pos > self.data.len() * 8
    }

    /// The next `n <= 56` bits without consuming them.
    #[inline(always)]
    pub fn peek(&self, n: u32) -> u64 {
        debug_assert!(n <= 56);
        let byte = self.pos >> 3;
        let word = match self.data.get(byte..byte + 8) {
            Some(b) => u64::from_le_bytes(b.try_into().unwrap()),
            None => self.load_tail(byte),
        };
        (word >> (self.pos & 7)) & mask64(n)
    }

    /// [`BitReader::peek`] without the bounds check, for decoders that have proved their
    /// reads stay inside the data.
    ///
    /// # Safety
    /// `(self.pos() >> 3) + 8 <= data.len()`.
    #[inline(always)]
    pub unsafe fn peek_unchecked(&self, n: u32) -> u64 {
        // SAFETY: the caller guarantees `(pos >> 3) + 8 <= data.len()`, so the eight bytes
        // read from `pos >> 3` are inside `data`.
        unsafe {
            debug_assert!(n <= 56 && (self.pos >> 3) + 8 <= self.data.len());
            let p = self.data.as_ptr().add(self.pos >> 3);
            let word = u64::from_le_bytes(p.cast::<[u8; 8]>().read_unaligned());
            (word >> (self.pos & 7)) & mask64(n)
        }
    }

    /// The next 64 bits without consuming them and without a bounds check.
    ///
    /// # Safety
    /// `(self.pos() >> 3) + 9 <= data.len()`.
    #[inline(always)]
    pub unsafe fn peek64_unchecked(&self) -> u64 {
        // SAFETY: the caller guarantees `(pos >> 3) + 9 <= data.len()`, so the eight bytes
        // from `pos >> 3` and the one after them are inside `data`.
        unsafe {
            debug_assert!((self.pos >> 3) + 9 <= self.data.len());
            let p = self.data.as_ptr().add(self.pos >> 3);
            let lo = u64::from_le_bytes(p.cast::<[u8; 8]>().read_unaligned());
            let hi = *p.add(8) as u64;
            let sh = self.pos & 7;
            // For sh = 0 the second term shifts `hi` out entirely.
            (lo >> sh) | ((hi << 1) << (63 - sh))
        }
    }

    #[cold]
    fn load_tail(&self, byte: usize) -> u64 {
        let mut buf = [0u8; 8];
        if byte < self.data.len() {
            let avail = &self.data[byte..];
            buf[..avail.len()].copy_from_slice(avail);
        }
        u64::from_le_bytes(buf)
    }

    /// Skip `n` bits.
    #[inline(always)]
    pub fn skip(&mut self, n: u32) {
        self.pos += n as usize;
    }

    /// Read `n <= 56` bits.
    #[inline(always)]
    pub fn read(&mut self, n: u32) -> u64 {
        let v = self.peek(n);
        self.pos += n as usize;
        v
    }

    /// Read `n <= 64` bits.
    #[inline(always)]
    pub fn read_u64(&mut self, n: u32) -> u64 {
        if n <= 56 {
            self.read(n)
        } else {
            let lo = self.read(32);
            lo | (self.read(n - 32) << 32)
        }
    }

    /// Read `n <= 128` bits.
    #[inline(always)]
    pub fn read_u128(&mut self, n: u32) -> u128 {
        if n <= 64 {
            self.read_u64(n) as u128
        } else {
            let lo = self.read_u64(64) as u128;
            lo | ((self.read_u64(n - 64) as u128) << 64)
        }
    }
}

/// The low `n` bits set (`n <= 64`).
#[inline]
pub const fn mask64(n: u32) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

/// Number of bits needed to store the values `0..n` (0 for `n <= 1`).
#[inline]
pub const fn bits_for(n: u32) -> u32 {
    if n <= 1 {
        0
    } else {
        32 - (n - 1).leading_zeros()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitvec::prelude::*;
    use proptest::prelude::*;

    proptest! {
        /// The writer's bit order is exactly bitvec's `Lsb0` order over bytes, and the reader
        /// reads back what it wrote.
        #[test]
        fn writer_matches_bitvec_lsb0(fields in proptest::collection::vec((any::<u128>(), 0u32..=128), 0..64)) {
            let mut buf = vec![0u8; 64 * 16 + 16];
            let mut w = SliceBitWriter::new(&mut buf);
            // The same fields into an array window (the writer's other buffer type).
            let mut window = [0u8; 64 * 16 + 16];
            let mut a = SliceBitWriter::new(&mut window);
            let mut reference: BitVec<u8, Lsb0> = BitVec::new();
            for &(v, n) in &fields {
                let v = if n == 128 { v } else { v & ((1u128 << n) - 1) };
                // Fields that `put_wide` takes go through it on odd draws.
                match n <= 120 && v & 1 == 1 {
                    true => { w.put_wide(v, n); a.put_wide(v, n) }
                    false => { w.put_u128(v, n); a.put_u128(v, n) }
                }
                for i in 0..n { reference.push((v >> i) & 1 == 1); }
            }
            let bits = w.bit_len();
            prop_assert_eq!(a.bit_len(), bits);
            prop_assert_eq!(&window[..], &buf[..]);
            prop_assert_eq!(bits, reference.len());
            let used = reference.as_raw_slice().len();
            prop_assert_eq!(&buf[..used], reference.as_raw_slice());
            prop_assert!(buf[used..].iter().all(|&b| b == 0));

            let mut r = BitReader::new(&buf[..used]);
            for &(v, n) in &fields {
                let v = if n == 128 { v } else { v & ((1u128 << n) - 1) };
                prop_assert_eq!(r.read_u128(n), v);
            }
            prop_assert!(!r.overran());
            prop_assert_eq!(r.pos(), bits);
        }
    }

    /// An array window too small for what is written panics (its bound is a constant, still
    /// checked), as a slice does: never a write out of bounds.
    #[test]
    #[should_panic]
    fn a_full_array_window_panics() {
        let mut window = [0u8; 16];
        let mut w = SliceBitWriter::new(&mut window);
        for _ in 0..3 {
            w.put(0x1F_FFFF_FFFF, 37);
        }
    }

    #[test]
    fn reader_past_end_yields_zeros_and_flags() {
        let data = [0xFFu8; 3];
        let mut r = BitReader::new(&data);
        assert_eq!(r.read(20), 0xFFFFF);
        assert!(!r.overran());
        assert_eq!(r.read(8), 0x0F); // 4 real bits then zeros
        assert!(r.overran());
    }

    #[test]
    fn unchecked_peeks_match_checked_reads() {
        // Bytes with no pattern a shift could hide behind (a multiplicative hash of the index).
        let data: Vec<u8> = (0..64u32)
            .map(|i| (i.wrapping_mul(0x9E37_79B1) >> 24) as u8)
            .collect();
        for pos in 0..(data.len() - 9) * 8 {
            let r = BitReader::at(&data, pos);
            for n in [1, 13, 33, 56] {
                // SAFETY: pos / 8 + 9 <= data.len().
                assert_eq!(unsafe { r.peek_unchecked(n) }, r.peek(n), "pos {pos} n {n}");
            }
            let lo = r.peek(32);
            let hi = BitReader::at(&data, pos + 32).peek(32);
            // SAFETY: as above.
            assert_eq!(unsafe { r.peek64_unchecked() }, lo | hi << 32, "pos {pos}");
        }
    }

    #[test]
    fn bits_for_values() {
        assert_eq!(bits_for(0), 0);
        assert_eq!(bits_for(1), 0);
        assert_eq!(bits_for(2), 1);
        assert_eq!(bits_for(31), 5);
        assert_eq!(bits_for(32), 5);
        assert_eq!(bits_for(33), 6);
        assert_eq!(bits_for(63), 6);
        assert_eq!(bits_for(128), 7);
    }
}
