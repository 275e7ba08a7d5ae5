//! Test helpers for every crate's tests, a dev-dependency only: synthetic inputs for the
//! codecs' round-trip and robustness tests, stream mutations, and a watchdog.
//!
//! These are *not* data for results: figures come from the real tensors in `datasets/`.
//! They exist to hit the corners a lossless codec must survive: NaN payloads, -0.0,
//! subnormals, infinities, all-zero and constant blocks, ramps, ReLU-style sparsity and
//! plain random bits. Generation is deterministic (SplitMix64) so failures reproduce.

use planepack_core::{Codec, ElemType};

pub mod alloc;

/// `codec`'s parallel encoder ([`Codec::encode_shaped_parallel`]) on a pool of 4 threads
/// whatever the machine has, so that tasks really run at once and finish out of order: what
/// the parallel-encoder tests compare with the serial encoder's bytes. Panics if it fails.
pub fn encode_on_4_threads(
    codec: &dyn Codec,
    data: &[u8],
    elem: ElemType,
    shape: &[usize],
) -> Vec<u8> {
    static POOL: std::sync::OnceLock<rayon::ThreadPool> = std::sync::OnceLock::new();
    let pool = POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(4)
            .build()
            .expect("a pool of 4 threads")
    });
    let mut out = Vec::new();
    pool.install(|| codec.encode_shaped_parallel(data, elem, shape, &mut out))
        .expect("the parallel encoder takes the tensor");
    out
}

/// SplitMix64: tiny, fast, deterministic.
#[derive(Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Roughly normal (sum of uniforms), mean 0, standard deviation 1.
    pub fn normal(&mut self) -> f64 {
        (0..12).map(|_| self.unit()).sum::<f64>() - 6.0
    }
}

/// The kinds of synthetic content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    RandomBits,
    AllZero,
    Constant,
    /// Consecutive integers (bit patterns step by one).
    IntRamp,
    /// Floats on a smooth curve.
    Smooth,
    /// Normal floats with about half of them replaced by zero, as after ReLU.
    ReluSparse,
    /// NaNs with payloads, -0.0, subnormals, +-Inf, mixed with normal values.
    Specials,
    /// Blocks of different kinds back to back.
    Mixed,
}

impl Pattern {
    pub const ALL: [Pattern; 8] = [
        Pattern::RandomBits,
        Pattern::AllZero,
        Pattern::Constant,
        Pattern::IntRamp,
        Pattern::Smooth,
        Pattern::ReluSparse,
        Pattern::Specials,
        Pattern::Mixed,
    ];
}

/// Bit patterns of special values per element type.
fn specials(elem: ElemType) -> &'static [u32] {
    match elem {
        ElemType::F32 => &[
            0x7FC0_0000,
            0x7FC0_0001,
            0xFFFF_FFFF,
            0x7F80_0001,
            0x7FBF_FFFF, // NaNs, payloads
            0x8000_0000, // -0.0
            0x0000_0001,
            0x807F_FFFF,
            0x0040_0000, // subnormals
            0x7F80_0000,
            0xFF80_0000, // +-Inf
            0x0000_0000,
        ],
        ElemType::BF16 => &[
            0x7FC0, 0x7FC1, 0xFFFF, 0x7F81, 0x8000, 0x0001, 0x807F, 0x7F80, 0xFF80, 0,
        ],
        ElemType::F16 => &[
            0x7E00, 0x7E01, 0xFFFF, 0x7C01, 0x8000, 0x0001, 0x83FF, 0x7C00, 0xFC00, 0,
        ],
        ElemType::U8 => &[0x7F, 0xFF, 0x80, 0x01, 0x00, 0x78, 0xF8],
    }
}

/// One value of `pattern` at index `i`, as a bit pattern of `elem`'s width.
fn value(pattern: Pattern, elem: ElemType, i: usize, rng: &mut Rng, constant: u64) -> u64 {
    let from_f64 = |x: f64| -> u64 {
        let f = (x as f32).to_bits() as u64;
        match elem {
            ElemType::F32 => f,
            ElemType::BF16 => f >> 16,
            ElemType::F16 => half_bits(x as f32),
            ElemType::U8 => f >> 24,
        }
    };
    let mask = planepack_core::bitio::mask64(elem.bits());
    match pattern {
        Pattern::RandomBits => rng.next_u64() & mask,
        Pattern::AllZero => 0,
        Pattern::Constant => constant & mask,
        Pattern::IntRamp => (constant.wrapping_add(i as u64)) & mask,
        Pattern::Smooth => from_f64((i as f64 * 0.01).sin() * 3.0),
        Pattern::ReluSparse => {
            let x = rng.normal();
            if x <= 0.0 {
                0
            } else {
                from_f64(x)
            }
        }
        Pattern::Specials => {
            let s = specials(elem);
            if rng.below(3) == 0 {
                from_f64(rng.normal())
            } else {
                s[rng.below(s.len() as u64) as usize] as u64
            }
        }
        Pattern::Mixed => unreachable!(),
    }
}

/// Crude f32 -> f16 bit conversion (truncating); only used to make plausible f16 patterns.
fn half_bits(x: f32) -> u64 {
    let b = x.to_bits();
    let sign = (b >> 16) & 0x8000;
    let exp = ((b >> 23) & 0xFF) as i32 - 127 + 15;
    let man = (b >> 13) & 0x3FF;
    let v = if exp <= 0 {
        0
    } else if exp >= 31 {
        0x7C00
    } else {
        ((exp as u32) << 10) | man
    };
    (sign | v) as u64
}

/// `len` bytes of `pattern` as little-endian elements of `elem` (a trailing partial element
/// gets the low bytes of one more value).
pub fn generate(pattern: Pattern, elem: ElemType, len: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed);
    let constant = rng.next_u64();
    let size = elem.size();
    let mut out = Vec::with_capacity(len + size);
    let n = len.div_ceil(size);
    if pattern == Pattern::Mixed {
        // 128-byte runs of randomly chosen patterns.
        let mut i = 0;
        while out.len() < len {
            let p = Pattern::ALL[rng.below(7) as usize];
            for _ in 0..128 / size {
                let v = value(p, elem, i, &mut rng, constant);
                out.extend_from_slice(&v.to_le_bytes()[..size]);
                i += 1;
            }
        }
    } else {
        for i in 0..n {
            let v = value(pattern, elem, i, &mut rng, constant);
            out.extend_from_slice(&v.to_le_bytes()[..size]);
        }
    }
    out.truncate(len);
    out
}

/// `len` bytes of FP32 elements laid out as a dequantized block-quantized tensor (GGUF Q8_0):
/// per block of 32 elements an FP16-representable scale `d` times int8 values `q` in
/// -127..=127 (one per block at -127 or 127), so that `d * q` is exact in FP32; every
/// `zero_block_every`-th block (if nonzero) is all zeros. For tests of the rANS codec's
/// block-scaled chunks (not a stand-in for real data in any figure).
pub fn block_scaled_f32(len: usize, seed: u64, zero_block_every: usize) -> Vec<u8> {
    let mut rng = Rng(seed);
    let mut out = Vec::with_capacity(len + 4);
    let mut block = 0;
    while out.len() < len {
        // An FP16 normal scale (11 significant bits), as f32.
        let d16 = (0x1c00 + rng.below(0x3000) as u32) & 0x7fff;
        let d = f32::from_bits(((d16 >> 10) + 112) << 23 | (d16 & 0x3ff) << 13);
        let zero = zero_block_every != 0 && block % zero_block_every == zero_block_every - 1;
        let peak = rng.below(32) as usize;
        for i in 0..32 {
            let q = if zero {
                0.0
            } else if i == peak {
                if rng.below(2) == 0 {
                    -127.0
                } else {
                    127.0
                }
            } else {
                (rng.normal() * 40.0).round().clamp(-127.0, 127.0) + 0.0 // never -0.0
            };
            out.extend_from_slice(&((d as f64 * q) as f32).to_le_bytes());
        }
        block += 1;
    }
    out.truncate(len);
    out
}

/// How a valid stream was damaged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation {
    FlipBit,
    RandomByte,
    Truncate,
    Extend,
    InsertByte,
    DeleteByte,
    RandomRun,
}

impl Mutation {
    pub const ALL: [Mutation; 7] = [
        Mutation::FlipBit,
        Mutation::RandomByte,
        Mutation::Truncate,
        Mutation::Extend,
        Mutation::InsertByte,
        Mutation::DeleteByte,
        Mutation::RandomRun,
    ];
}

/// Activation-like elements of `width` bytes (1, 2 or 4), as the modelled rANS chunk sees
/// after ReLU, clamps and repeated rows: 30 % zeros, runs of the left value, copies of the
/// element `row` back, a clamp value (6.0's top bytes) and noise around 0.5. Test input for
/// the run/repeat paths; never a figure.
pub fn activation_like(n: usize, width: usize, row: usize, seed: u64) -> Vec<u8> {
    assert!(matches!(width, 1 | 2 | 4), "width {width}");
    let mut rng = Rng(seed | 1);
    let shift = 32 - 8 * width as u32;
    let mut v: Vec<u32> = Vec::with_capacity(n);
    for i in 0..n {
        let x = rng.next_u64();
        let val = match x % 10 {
            0..=2 => 0,
            3 if i > 0 => v[i - 1],
            4 if row > 0 && i >= row => v[i - row],
            5 => 0x40c0_0000 >> shift,
            _ => (0x3f00_0000 | (x as u32 & 0x00ff_ffff)) >> shift,
        };
        v.push(val);
    }
    v.iter()
        .flat_map(|x| x.to_le_bytes()[..width].to_vec())
        .collect()
}

/// `n` floats of `width` bytes (2: BF16, 4: FP32) whose top mantissa bits depend on the
/// exponent (the structure the rANS context planes code): exponents 0 to 5 binades below 1.0,
/// random signs, and the mantissa of a value `d` binades down shifted right by `d` (its values
/// crowd the binade's low end); every `zero_every`-th one zero (0: none). Test input; never a
/// figure.
pub fn exponent_dependent_floats(n: usize, width: usize, zero_every: usize, seed: u64) -> Vec<u8> {
    assert!(matches!(width, 2 | 4), "width {width}");
    let mut rng = Rng(seed | 1);
    let mut out = Vec::with_capacity(n * width);
    for i in 0..n {
        let bits = if zero_every > 0 && i % zero_every == 0 {
            0
        } else {
            let d = rng.below(6) as u32;
            let m = (rng.next_u64() as u32 & 0x7f_ffff) >> d;
            (rng.below(2) as u32) << 31 | (127 - d) << 23 | m
        };
        out.extend_from_slice(&bits.to_le_bytes()[4 - width..]);
    }
    out
}

/// The BF16 element whose rotated value (as the rANS planes split it) has plane 0 `exponent`
/// and plane 1 `plane1` (seven mantissa bits and, in its low bit, the sign), little-endian.
fn rotated_bf16(exponent: u16, plane1: u8) -> [u8; 2] {
    (exponent << 8 | plane1 as u16)
        .rotate_right(1)
        .to_le_bytes()
}

/// A `rows` x 64 matrix of BF16 elements, each [`rotated_bf16`] of the (exponent, plane-1
/// byte) that `element` gives from whether its row is the first of a 64 KiB chunk and the
/// pair of the element one row up (127, 0 above the first row): the twin-table inputs.
fn bf16_rows(rows: usize, mut element: impl FnMut(bool, (u16, u8)) -> (u16, u8)) -> Vec<u8> {
    const COLS: usize = 64;
    const CHUNK_ROWS: usize = (64 << 10) / (2 * COLS);
    let mut up = [(127u16, 0u8); COLS];
    let mut out = Vec::with_capacity(rows * COLS * 2);
    for r in 0..rows {
        for e in up.iter_mut() {
            *e = element(r % CHUNK_ROWS == 0, *e);
            out.extend_from_slice(&rotated_bf16(e.0, e.1));
        }
    }
    out
}

/// BF16 elements (rotated: plane 0 the exponent byte, plane 1 seven mantissa bits and the
/// sign) in four exponents whose plane-1 histograms make three of the rANS context tables
/// equal: exponent 127 (the most frequent: the stream's `E0`, context 3) with low plane-1
/// bytes; 124 (context 0), 128 (context 4) and 129 (context 5) with the same high plane-1
/// bytes, 124 exactly twice as often as each of the others, so their tables normalise to the
/// same frequencies. A stream of it with context 4's table taken out decodes, with the first
/// table (a GPU's stand-in for an absent one) or the last (the CPU's) in its place, to these
/// very bytes and its lanes end right: only the check that every context plane's element has
/// its table can refuse it. 448 elements a period, `periods` periods. Test input; never a
/// figure.
pub fn twin_context_tables_bf16(periods: usize) -> Vec<u8> {
    let mut rng = Rng(0x7_0c7);
    let mut skewed = |span: u64| {
        let top = rng.below(span) + 1;
        rng.below(top) as u8
    };
    let high: Vec<u8> = (0..64).map(|_| 255 - skewed(64)).collect();
    let low: Vec<u8> = (0..192).map(|_| skewed(48)).collect();
    let mut period = Vec::with_capacity(448 * 2);
    for i in 0..64 {
        for k in 0..3 {
            period.extend_from_slice(&rotated_bf16(127, low[3 * i + k]));
        }
        period.extend_from_slice(&rotated_bf16(124, high[i]));
        period.extend_from_slice(&rotated_bf16(128, high[i]));
        period.extend_from_slice(&rotated_bf16(124, high[i]));
        period.extend_from_slice(&rotated_bf16(129, high[i]));
    }
    period.repeat(periods)
}

/// A `rows` x 64 matrix of BF16 elements (rotated: plane 0 the exponent byte) whose
/// plane 0, given the element one row up, makes three of the rANS row tables equal: below an
/// exponent of 124 or 129, and in a 64 KiB chunk's first row, the exponent is always 127;
/// below a 127 it is 124, 127 or 129 (one, two and one in four); plane 1 random. The row
/// tables of the contexts of 124 and 129 and of the first row so hold one symbol each, the
/// same: a stream of it with 129's table taken out decodes, with the first table (a GPU's
/// stand-in for an absent one) or the last (the CPU's, the first row's) in its place, to
/// these very bytes and its lanes end right, so only the check that every row plane's
/// element has its table can refuse it. Test input; never a figure.
pub fn twin_row_tables_bf16(rows: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed | 1);
    bf16_rows(rows, |first, (up, _)| {
        let exponent = match (first, up) {
            (true, _) | (_, 124 | 129) => 127,
            _ => [124, 127, 127, 129][rng.below(4) as usize],
        };
        (exponent, rng.below(256) as u8)
    })
}

/// A `rows` x 64 matrix of BF16 elements (rotated: plane 0 the exponent byte, plane 1 seven
/// mantissa bits and the sign in its low bit) whose plane 1, given its exponent and the sign
/// one row up, makes four of the rANS sign tables equal: exponents 127 (three in four: the
/// stream's `E0`) and 124, at random; plane 1 is 0 everywhere but below a positive element
/// (sign bit 0) at exponent 127, where it is 0x00, 0x01, 0x10 or 0x11 at random. The tables
/// of the first row's contexts, of exponent 124 below a positive element and of both
/// exponents below a negative one so hold the one symbol 0: a stream of it with the table of
/// exponent 124 below a negative element taken out decodes, with the first table (a GPU's
/// stand-in for an absent one) or the last (the CPU's) in its place, to these very bytes and
/// its lanes end right, so only the check that every sign plane's element has its table can
/// refuse it. Test input; never a figure.
pub fn twin_sign_tables_bf16(rows: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed | 1);
    bf16_rows(rows, |first, (_, up)| {
        let exponent = if rng.below(4) == 0 { 124 } else { 127 };
        let plane1 = match !first && up & 1 == 0 && exponent == 127 {
            true => [0x00, 0x01, 0x10, 0x11][rng.below(4) as usize],
            false => 0,
        };
        (exponent, plane1)
    })
}

/// A `rows` x `cols` matrix of floats whose magnitude is a property of the column (a KV
/// cache's channels: each column's exponent is fixed, give or take one binade, and spread
/// over 12 binades across columns), random signs and mantissas; `elem` BF16, FP16 or F32.
/// What the rANS row planes code (plane 0 given the element one row up). Test input; never
/// a figure.
pub fn channel_scaled(rows: usize, cols: usize, elem: ElemType, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed | 1);
    let scales: Vec<i32> = (0..cols).map(|_| rng.below(12) as i32).collect();
    let mut out = Vec::with_capacity(rows * cols * elem.size());
    for _ in 0..rows {
        for &d in &scales {
            let jitter = match rng.below(8) {
                0 => -1,
                1 => 1,
                _ => 0,
            };
            let sign = rng.below(2) as u32;
            let m = rng.next_u64() as u32;
            let e = d + jitter;
            match elem {
                ElemType::F16 => {
                    let bits = sign << 15 | ((12 - e) as u32) << 10 | (m & 0x3ff);
                    out.extend_from_slice(&(bits as u16).to_le_bytes());
                }
                _ => {
                    let bits = sign << 31 | ((124 - e) as u32) << 23 | (m & 0x7f_ffff);
                    out.extend_from_slice(&bits.to_le_bytes()[4 - elem.size()..]);
                }
            }
        }
    }
    out
}

/// [`channel_scaled`]'s matrix with each column keeping one sign but for one element in
/// 32 (feature-map and KV-cache channels whose sign follows the channel): what the rANS
/// sign planes code (plane 1, whose low bit is the sign once rotated, given the sign one row
/// up). Test input; never a figure.
pub fn channel_signed(rows: usize, cols: usize, elem: ElemType, seed: u64) -> Vec<u8> {
    let mut out = channel_scaled(rows, cols, elem, seed);
    let mut rng = Rng(seed ^ 0x5157_a11e);
    let signs: Vec<u8> = (0..cols).map(|_| rng.below(2) as u8).collect();
    let w = elem.size();
    for (i, e) in out.chunks_exact_mut(w).enumerate() {
        let sign = signs[i % cols] ^ u8::from(rng.below(32) == 0);
        e[w - 1] = (e[w - 1] & 0x7f) | sign << 7;
    }
    out
}

/// `n` smooth floats of `width` bytes (2: BF16/FP16 bits, 4: FP32): a random walk in the
/// floats' order (steps of up to `max_step` ulps either way, through zero and across signs),
/// with a NaN (payload kept), an infinity, -0.0 and a subnormal every 997 elements: what the
/// rANS difference chunks code. Test input; never a figure.
pub fn smooth_walk(n: usize, width: usize, max_step: u32, seed: u64) -> Vec<u8> {
    assert!(matches!(width, 2 | 4), "width {width}");
    let bits = 8 * width as u32;
    let mask = u32::MAX >> (32 - bits);
    let sign = 1u32 << (bits - 1);
    let mut rng = Rng(seed | 1);
    // Start just below zero, in the floats' order (sign-magnitude to offset binary).
    let mut o = sign - 3 * max_step;
    let mut out = Vec::with_capacity(n * width);
    for i in 0..n {
        let step = rng.below(2 * max_step as u64 + 1) as u32;
        o = o.wrapping_add(step).wrapping_sub(max_step) & mask;
        let v = if o & sign != 0 { o ^ sign } else { o ^ mask };
        let v = match i % 997 {
            101 => mask >> 1,                     // NaN with every payload bit set
            303 => 0x7f80_0000u32 >> (32 - bits), // +Inf (BF16 and FP32)
            505 => sign,                          // -0.0
            707 => 1,                             // the least subnormal
            _ => v,
        };
        out.extend_from_slice(&v.to_le_bytes()[..width]);
    }
    out
}

/// `n` FP32 values that are BF16 values (random signs, 6-bit mantissas and a few exponents)
/// times one scale (`1/sqrt(8)`, as attention scores are), so that their low three bytes take
/// at most 128 values, with a NaN (payload kept), an infinity, -0.0, a subnormal and
/// zeros every 997 elements: what the rANS tail-dictionary chunks code. Test input; never a
/// figure.
pub fn scaled_bf16_f32(n: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed | 1);
    let scale = 0.125f32.sqrt();
    let mut out = Vec::with_capacity(4 * n);
    for i in 0..n {
        let b = (rng.next_u64() as u32 & 0x803f) | (0x3c00 + ((rng.below(12) as u32) << 7));
        let v = match i % 997 {
            101 => 0x7fc0_1234, // NaN with a payload
            303 => 0x7f80_0000, // +Inf
            505 => 0x8000_0000, // -0.0
            707 => 3,           // a subnormal
            808..=820 => 0,
            _ => (f32::from_bits(b << 16) * scale).to_bits(),
        };
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

/// Apply one mutation of kind `m` to `stream` at a random place.
pub fn mutate(stream: &[u8], m: Mutation, rng: &mut Rng) -> Vec<u8> {
    let mut s = stream.to_vec();
    let at = |rng: &mut Rng, n: usize| {
        if n == 0 {
            0
        } else {
            rng.below(n as u64) as usize
        }
    };
    match m {
        Mutation::FlipBit if !s.is_empty() => {
            let i = at(rng, s.len());
            s[i] ^= 1 << rng.below(8);
        }
        Mutation::RandomByte if !s.is_empty() => {
            let i = at(rng, s.len());
            s[i] = rng.next_u64() as u8;
        }
        Mutation::Truncate if !s.is_empty() => {
            let n = at(rng, s.len());
            s.truncate(n);
        }
        Mutation::Extend => {
            for _ in 0..1 + rng.below(16) {
                s.push(rng.next_u64() as u8);
            }
        }
        Mutation::InsertByte => {
            let i = at(rng, s.len() + 1);
            s.insert(i, rng.next_u64() as u8);
        }
        Mutation::DeleteByte if !s.is_empty() => {
            let i = at(rng, s.len());
            s.remove(i);
        }
        Mutation::RandomRun if !s.is_empty() => {
            let i = at(rng, s.len());
            let n = (1 + rng.below(32) as usize).min(s.len() - i);
            for b in &mut s[i..i + n] {
                *b = rng.next_u64() as u8;
            }
        }
        _ => s.push(0),
    }
    s
}

/// Run `f` on another thread and fail if it does not finish within `secs` seconds: how the
/// robustness tests prove that no decoder loops forever on bad input.
pub fn finishes_within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(std::time::Duration::from_secs(secs)) {
        Ok(v) => v,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("did not finish within {secs} s: a decoder hangs")
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            panic!("the worker thread panicked")
        }
    }
}

#[doc(hidden)]
pub use planepack_core::cpu as __cpu;

/// `f::<T>(args)` for every tier `T` this CPU runs (`planepack_core::cpu::tiers`), as
/// `Vec<(tier, result)>`: how a test runs a tiered function at each tier the machine has.
/// `f` must be a function whose only unchecked requirement is that the CPU runs tier `T`.
#[macro_export]
macro_rules! at_every_tier {
    ($f:ident, ($($arg:expr),* $(,)?)) => {
        $crate::__cpu::tiers()
            .into_iter()
            .map(|t| {
                // SAFETY: `cpu::tiers()` lists only tiers this CPU runs, which is all `f` needs.
                let r = unsafe {
                    match t {
                        $crate::__cpu::AVX512 => $f::<{ $crate::__cpu::AVX512 }>($($arg),*),
                        $crate::__cpu::X86_64_V3 => $f::<{ $crate::__cpu::X86_64_V3 }>($($arg),*),
                        _ => $f::<{ $crate::__cpu::PORTABLE }>($($arg),*),
                    }
                };
                (t, r)
            })
            .collect::<Vec<_>>()
    };
}

/// Values a hostile header field takes, for a field of `bytes` bytes: the edges of its type's
/// range (0, 1, the largest, the sign bit), powers of two where sizes computed from a field
/// wrap (2^k for k near 31, 32, 60-63), and one more or less than the field's own value.
pub fn extreme_values(bytes: usize, own: u64) -> Vec<u64> {
    let bits = 8 * bytes as u32;
    let max = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let mut v = vec![0, 1, 2, 3, max, max - 1, max >> 1, (max >> 1) + 1];
    for k in [
        7, 8, 15, 16, 24, 28, 29, 30, 31, 32, 33, 40, 48, 56, 59, 60, 61, 62, 63,
    ] {
        if k < bits {
            v.push(1u64 << k);
            v.push((1u64 << k) - 1);
        }
    }
    v.push(own.wrapping_add(1) & max);
    v.push(own.wrapping_sub(1) & max);
    v.push(own.wrapping_mul(2) & max);
    v.sort_unstable();
    v.dedup();
    v.retain(|&x| x != own);
    v
}

/// Every stream obtained from `stream` by overwriting one little-endian field of 1, 2, 4 or 8
/// bytes that starts in the first `span` bytes with each of its [`extreme_values`]: how the
/// robustness tests reach a reader with header fields at their type's full range, which
/// random mutations of valid streams almost never do (a 2^60 column count, a length of
/// 2^63). Returns (offset, width, value, stream).
pub fn header_field_variants(
    stream: &[u8],
    span: usize,
) -> impl Iterator<Item = (usize, usize, u64, Vec<u8>)> + '_ {
    let span = span.min(stream.len());
    (0..span).flat_map(move |at| {
        [1usize, 2, 4, 8]
            .into_iter()
            .filter(move |w| at + w <= stream.len())
            .flat_map(move |w| {
                let mut own = [0u8; 8];
                own[..w].copy_from_slice(&stream[at..at + w]);
                let own = u64::from_le_bytes(own);
                extreme_values(w, own).into_iter().map(move |x| {
                    let mut s = stream.to_vec();
                    s[at..at + w].copy_from_slice(&x.to_le_bytes()[..w]);
                    (at, w, x, s)
                })
            })
    })
}

/// The few values [`header_field_pairs`] combines: the type's edges and the powers of two
/// where products of two fields wrap.
fn pair_values(bytes: usize) -> Vec<u64> {
    let bits = 8 * bytes as u32;
    let max = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let mut v = vec![0, 1, max, max >> 1, (max >> 1) + 1];
    v.extend(
        [16, 31, 32, 60, 61, 62]
            .into_iter()
            .filter(|&k| k < bits)
            .map(|k| 1u64 << k),
    );
    v.sort_unstable();
    v.dedup();
    v
}

/// Every stream obtained from `stream` by overwriting two aligned little-endian fields of the
/// same width (8-byte fields at multiples of 8, 4-byte fields at multiples of 4) that start in
/// the first `span` bytes, with a few extreme values each. A size computed from two fields (a
/// column count and a length) wraps only when both are hostile, which a one-field sweep never
/// tries. Returns ((offset, offset), width, stream).
pub fn header_field_pairs(
    stream: &[u8],
    span: usize,
) -> impl Iterator<Item = ((usize, usize), usize, Vec<u8>)> + '_ {
    let span = span.min(stream.len());
    [8usize, 4].into_iter().flat_map(move |w| {
        let at: Vec<usize> = (0..span)
            .step_by(w)
            .filter(|a| a + w <= stream.len())
            .collect();
        let values = pair_values(w);
        let mut out = Vec::new();
        for (i, &a) in at.iter().enumerate() {
            for &b in &at[i + 1..] {
                for &x in &values {
                    for &y in &values {
                        let mut s = stream.to_vec();
                        s[a..a + w].copy_from_slice(&x.to_le_bytes()[..w]);
                        s[b..b + w].copy_from_slice(&y.to_le_bytes()[..w]);
                        out.push(((a, b), w, s));
                    }
                }
            }
        }
        out
    })
}
