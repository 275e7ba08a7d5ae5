//! Quick probe: what the AVX2 lane decoder's gathers alone cost on this CPU, the floor under
//! its time a symbol. The kernel's shape without its arithmetic: four groups of eight lanes
//! (32 lanes, as a plane of 32 K symbols has), each step a table gather whose index comes from
//! the lane's state, then a multiply into the next state; with `words`, also the decoder's
//! 32-bit gather of each lane's next two words every other round. Tables of 8 KiB (one table
//! in L1) to 256 KiB (the eight row tables and six context tables of 16 KiB a transformer
//! batch decodes with: 224 KiB). For tuning, not for figures (`cargo xtask criterion` makes
//! those); see docs/performance.md, "What bounds the AVX2 lane decoder".
//!
//! `cargo run --release -p planepack-rans --example gather_probe`

#[cfg(target_arch = "x86_64")]
mod probe {
    use std::arch::x86_64::*;
    use std::time::Instant;

    /// `rounds` rounds of 32 lanes over `table` (a power-of-two length), with or without the
    /// word gathers from `words` (65 536 entries); returns a value that depends on every step.
    ///
    /// # Safety
    /// The CPU must have AVX2; `table.len()` must be a power of two, `words` 65 538 long.
    #[target_feature(enable = "avx2")]
    unsafe fn run(table: &[u32], words: &[u16], rounds: usize, with_words: bool) -> u32 {
        let mask = _mm256_set1_epi32(table.len() as i32 - 1);
        let mul = _mm256_set1_epi32(0x9E37_79B1_u32 as i32);
        let low = _mm256_set1_epi32(0xffff);
        let mut xs: [__m256i; 4] = std::array::from_fn(|g| {
            _mm256_add_epi32(
                _mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8),
                _mm256_set1_epi32(16 * g as i32),
            )
        });
        let mut ps = [_mm256_setzero_si256(); 4];
        let t = table.as_ptr() as *const i32;
        let w = words.as_ptr() as *const i32;
        for r in 0..rounds {
            for g in 0..4 {
                let idx = _mm256_and_si256(_mm256_srli_epi32::<7>(xs[g]), mask);
                // SAFETY: idx is masked below the table's power-of-two length.
                let v = unsafe { _mm256_i32gather_epi32::<4>(t, idx) };
                let mut x =
                    _mm256_add_epi32(_mm256_mullo_epi32(_mm256_xor_si256(xs[g], v), mul), v);
                if with_words && r % 2 == 0 {
                    ps[g] =
                        _mm256_and_si256(_mm256_add_epi32(ps[g], _mm256_srli_epi32::<31>(x)), low);
                    // SAFETY: ps is below 65 536, and 32 bits at word ps are words ps and ps + 1,
                    // inside `words` (65 538 long).
                    x = _mm256_xor_si256(x, unsafe { _mm256_i32gather_epi32::<2>(w, ps[g]) });
                }
                xs[g] = x;
            }
        }
        let all = xs
            .iter()
            .fold(_mm256_setzero_si256(), |a, b| _mm256_xor_si256(a, *b));
        let mut out = [0u32; 8];
        // SAFETY: `out` holds the eight lanes.
        unsafe { _mm256_storeu_si256(out.as_mut_ptr() as *mut __m256i, all) };
        out.iter().fold(0, |a, b| a ^ b)
    }

    pub fn main() {
        if !planepack_core::cpu::x86_64_v3() {
            println!("this CPU has no AVX2: the lane decoder's AVX2 kernel does not run here");
            return;
        }
        let words: Vec<u16> = (0..65_538u32)
            .map(|i| i.wrapping_mul(2_654_435_761) as u16)
            .collect();
        let rounds = 2_000_000;
        println!("ns a symbol (32 lanes, best of 5):");
        for with_words in [false, true] {
            for kib in [8usize, 16, 32, 64, 128, 256] {
                let table: Vec<u32> = (0..(kib * 256) as u32)
                    .map(|i| i.wrapping_mul(0x85eb_ca6b) ^ 0x1234)
                    .collect();
                let mut best = f64::MAX;
                let mut sink = 0;
                for _ in 0..5 {
                    let t = Instant::now();
                    // SAFETY: AVX2 checked above; the table's length is a power of two and
                    // `words` is 65 538 long.
                    sink ^= unsafe { run(&table, &words, rounds, with_words) };
                    best = best.min(t.elapsed().as_secs_f64());
                }
                println!(
                    "  table gather{} from {kib:>3} KiB: {:.3}  ({sink:08x})",
                    if with_words { " + word gather" } else { "" },
                    best / (rounds as f64 * 32.0) * 1e9
                );
            }
        }
    }
}

fn main() {
    #[cfg(target_arch = "x86_64")]
    probe::main();
    #[cfg(not(target_arch = "x86_64"))]
    println!("an x86_64 probe: the lane decoder's AVX2 kernel does not run here");
}
