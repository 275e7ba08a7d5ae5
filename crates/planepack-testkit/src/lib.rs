//! Test helpers for every crate's tests, a dev-dependency only: synthetic inputs for the
//! codecs' round-trip and robustness tests, stream mutations, and a watchdog.
//!
//! These are *not* data for results: figures come from the real tensors in `datasets/`.
//! They exist to hit the corners a lossless codec must survive: NaN payloads, -0.0,
//! subnormals, infinities, all-zero and constant blocks, ramps, ReLU-style sparsity and
//! plain random bits. Generation is deterministic (SplitMix64) so failures reproduce.

use planepack_core::ElemType;

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
