//! What the host and the kernels must agree on, defined once, here, in Rust.
//!
//! A constant written twice (once in Rust, once in WGSL) drifts; a uniform struct laid out
//! twice drifts silently (the kernel reads the wrong field and decodes garbage that the status
//! checks may not catch). So:
//!
//! * the error bits the kernels set and the host names ([`ERRORS`]), the bit-plane mode tags,
//!   the block-table entry layout and the block size are generated into every kernel's source
//!   as WGSL `const`s ([`wgsl_prelude`]); the `.wgsl` files use the names only;
//! * each kernel's `Params` uniform is a `Pod` struct here, with its field names
//!   ([`KernelParams::FIELDS`]); `tests/shaders.rs` checks them against naga's reflection of the
//!   WGSL struct (names, order, offsets, types, size), for every kernel.

use planepack_bitplane::Mode;

/// The error bits a kernel ORs into `status[0]`, with what [`crate::GpuError::Corrupt`] calls them.
pub const ERRORS: [(&str, u32, &str); 9] = [
    ("ERR_BOUNDS", 1, "a read past the stream"),
    ("ERR_OVERRUN", 2, "a read past a chunk"),
    ("ERR_TAG", 4, "a bad block tag or length"),
    ("ERR_LENGTH", 8, "lengths that do not add up"),
    ("ERR_SYMBOL", 16, "a bad symbol"),
    ("ERR_VALUE", 32, "a bad value or nonzero padding"),
    ("ERR_ROW", 64, "a row index out of range"),
    ("ERR_LAYOUT", ERR_LAYOUT, "subgroups it cannot number"),
    ("ERR_LOOP", ERR_LOOP, "a loop the driver cut short"),
];

/// The error bit a subgroup kernel sets when it cannot number its subgroups: the host reruns
/// the decode on the workgroup-memory path.
pub const ERR_LAYOUT: u32 = 256;

/// The error bit a kernel sets when its canary loop ran fewer times than asked: the driver
/// stopped the invocation's loops (llvmpipe's loop limiter, [`LOOP_ITERATIONS_MAX`]), so its
/// output is incomplete. The host reports it as unsupported, not as a corrupt stream.
pub const ERR_LOOP: u32 = 512;

/// The most loop iterations one invocation may make, all loops together. llvmpipe (CI's
/// Vulkan and GL driver) counts every iteration of every loop of an invocation (its shader is
/// one inlined function) and, once 65535 are spent, ends each loop after its current pass: a
/// kernel that loops longer returns incomplete output without any fault. Portable kernels stay
/// under it, and the host checks the launches whose loops grow with the input (the IBP
/// decoder's rows, [`crate::Gpu::prepare_ibp`]; the rANS decoder's lanes are bounded by
/// `MAX_MODELLED_LANE` in `rans.rs`).
pub const LOOP_ITERATIONS_MAX: u32 = 65535;

/// Bits of the tag in a bit-plane block-table entry (the payload length takes the rest).
pub const TAG_BITS: u32 = planepack_bitplane::TAG_BITS;

/// Candidate masks the IBP score kernel takes in one pass (the threshold sweep has six).
pub const IBP_MAX_CANDIDATES: u32 = 8;

/// Words of an IBP tensor's tail (the bytes after the rows) each workgroup copies: 64 words
/// per invocation. One workgroup copying a whole tail looped over it, and llvmpipe ends an
/// invocation's loops after 65535 iterations in all: a tail over about 3 MiB came back wrong.
pub const IBP_TAIL_WORDS_PER_GROUP: u32 = 64 * 64;

/// The names of the error bits set in `flags`.
pub fn describe_flags(flags: u32) -> String {
    let v: Vec<&str> = ERRORS
        .iter()
        .filter(|(_, b, _)| flags & b != 0)
        .map(|(_, _, n)| *n)
        .collect();
    if v.is_empty() {
        format!("error bits {flags:#x}")
    } else {
        v.join(", ")
    }
}

/// The WGSL constants every decoder kernel is compiled with.
pub fn wgsl_prelude() -> String {
    let mut s =
        String::from("// Generated from planepack-gpu's contract.rs: do not restate in WGSL.\n");
    for (name, bit, _) in ERRORS {
        s += &format!("const {name}: u32 = {bit}u;\n");
    }
    for m in Mode::ALL {
        s += &format!(
            "const MODE_{}: u32 = {}u;\n",
            format!("{m:?}").to_uppercase(),
            m as u32
        );
    }
    s += &format!(
        "const TABLE_ENTRY_BITS: u32 = {}u;\nconst TAG_BITS: u32 = {TAG_BITS}u;\nconst BLOCK_BITS: u32 = {}u;\n",
        planepack_bitplane::TABLE_ENTRY_BITS,
        planepack_bitplane::block::RAW_BITS,
    );
    s += &format!("const IBP_MAX_CANDIDATES: u32 = {IBP_MAX_CANDIDATES}u;\n");
    s += &format!("const IBP_TAIL_WORDS_PER_GROUP: u32 = {IBP_TAIL_WORDS_PER_GROUP}u;\n");
    for (name, bits, len) in planepack_bitplane::CODES {
        s += &format!("const CODE_{name}: u32 = {bits}u;\nconst CODE_{name}_LEN: u32 = {len}u;\n");
    }
    s += &format!(
        "const CHUNK_SLOT_WORDS: u32 = {}u;\n",
        planepack_bitplane::MAX_CHUNK_BYTES.div_ceil(4)
    );
    s += &rans_constants();
    for (name, v) in RANS_SOURCES {
        s += &format!("const {name}: u32 = {v}u;\n");
    }
    s
}

/// Where the rANS encoder's lane jobs take their symbols and its assembly segments their
/// bytes (`shaders/rans_lanes.wgsl`, `shaders/rans_assemble.wgsl`).
pub const SRC_LITERAL: u32 = 0;
pub const SRC_WORDS: u32 = 1;
pub const SRC_RAW: u32 = 2;
pub const SRC_DENSE: u32 = 3;
pub const SRC_NONZERO: u32 = 4;
pub const SRC_MASK: u32 = 5;
/// What `shaders/rans_count.wgsl` writes besides its records (`RansCountParams::write_out`):
/// nothing (rotation samples), the zero masks (chunks), or only the nonzero elements of the
/// chunks whose sparse layout the host planned (no histograms, no records).
pub const COUNT_RECORDS: u32 = 0;
pub const COUNT_MASKS: u32 = 1;
pub const COUNT_NONZERO: u32 = 2;
const RANS_SOURCES: [(&str, u32); 9] = [
    ("COUNT_RECORDS", COUNT_RECORDS),
    ("COUNT_MASKS", COUNT_MASKS),
    ("COUNT_NONZERO", COUNT_NONZERO),
    ("SRC_LITERAL", SRC_LITERAL),
    ("SRC_WORDS", SRC_WORDS),
    ("SRC_RAW", SRC_RAW),
    ("SRC_DENSE", SRC_DENSE),
    ("SRC_NONZERO", SRC_NONZERO),
    ("SRC_MASK", SRC_MASK),
];

/// The rANS format's constants (`planepack-rans`, `docs/format-rans.md`): chunk modes, plane
/// kinds, lane and table limits, the modelled chunk's alphabet and tables, and the
/// block-scaled chunk's block sizes.
fn rans_constants() -> String {
    use planepack_rans::internals::contexts as cx;
    use planepack_rans::internals::modelled as m;
    use planepack_rans::internals::scaled as sc;
    let consts: [(&str, u32); 38] = [
        ("CHUNK_RAW", planepack_rans::CHUNK_RAW as u32),
        ("CHUNK_DENSE", planepack_rans::CHUNK_DENSE as u32),
        ("CHUNK_SPARSE", planepack_rans::CHUNK_SPARSE as u32),
        ("CHUNK_MODELLED", m::CHUNK_MODELLED as u32),
        ("CHUNK_SCALED", sc::CHUNK_SCALED as u32),
        (
            "CHUNK_DIFFERENCE",
            planepack_rans::internals::difference::CHUNK_DIFFERENCE as u32,
        ),
        (
            "CHUNK_TAILS",
            planepack_rans::internals::tails::CHUNK_TAILS as u32,
        ),
        (
            "SCALED_BLOCK_LOG2_MIN",
            *sc::BLOCK_LOG2_RANGE.start() as u32,
        ),
        ("SCALED_BLOCK_LOG2_MAX", *sc::BLOCK_LOG2_RANGE.end() as u32),
        ("PLANE_RAW", planepack_rans::PLANE_RAW as u32),
        ("PLANE_CONST", planepack_rans::PLANE_CONST as u32),
        ("PLANE_RANS", planepack_rans::PLANE_RANS as u32),
        ("MAX_LANES", planepack_rans::internals::MAX_LANES as u32),
        ("L", planepack_rans::internals::L),
        ("LIST_MAX", planepack_rans::internals::LIST_MAX as u32),
        ("RUNS_MAX", planepack_rans::internals::RUNS_MAX as u32),
        ("PROB_BITS", planepack_rans::internals::PROB_BITS),
        ("SLOT_CUM_SHIFT", planepack_rans::internals::SLOT_CUM_SHIFT),
        (
            "SLOT_FREQ_SHIFT",
            planepack_rans::internals::SLOT_FREQ_SHIFT,
        ),
        ("MODEL_CONTEXTS", m::CONTEXTS as u32),
        ("MODEL_SYMBOLS", m::SYMBOLS as u32),
        ("MODEL_PROB_BITS", m::MODEL_PROB_BITS),
        ("MODEL_LIST_MAX", m::LIST_MAX as u32),
        ("MODEL_LANE_HEADER", m::LANE_HEADER as u32),
        ("SYM_ZERO", m::SYM_ZERO as u32),
        ("SYM_LEFT", m::SYM_LEFT as u32),
        ("SYM_UP", m::SYM_UP as u32),
        ("SYM_DICT", m::SYM_DICT as u32),
        ("SYM_LITERAL", m::SYM_LITERAL as u32),
        ("MODEL_RANK_WORDS", crate::rans::MODEL_RANK_WORDS),
        ("PLANE_CONTEXT", cx::PLANE_CONTEXT as u32),
        (
            "PLANE_ROW_CONTEXT",
            planepack_rans::internals::row_contexts::PLANE_ROW_CONTEXT as u32,
        ),
        (
            "PLANE_SIGN",
            planepack_rans::internals::sign_contexts::PLANE_SIGN as u32,
        ),
        (
            "SIGN_CLASSES",
            planepack_rans::internals::sign_contexts::SIGN_CLASSES as u32,
        ),
        ("CTX_ABSENT", cx::ABSENT as u32),
        ("CTX_INDEX_WORDS", crate::rans::CTX_INDEX_WORDS),
        ("CTX_TABLE_WORDS", crate::rans::CTX_TABLE_WORDS),
        ("OTHER_MODES", crate::rans::OTHER_MODES_MASK),
    ];
    let mut s: String = consts
        .iter()
        .map(|(n, v)| format!("const {n}: u32 = {v}u;\n"))
        .collect();
    for (n, v) in [
        ("CTX_LOW", m::CTX_LOW),
        ("CTX_HIGH", m::CTX_HIGH),
        ("CTX_LITERAL", m::CTX_LITERAL),
    ] {
        s += &format!("const {n}: i32 = {v}i;\n");
    }
    s
}

/// A kernel's uniform parameters: a `Pod` struct laid out as the WGSL struct `Params` of
/// `wgsl_file`, whose members are `FIELDS` (all `u32`) in this order; the rest is padding to the
/// uniform's 16-byte size rule.
pub trait KernelParams: bytemuck::Pod {
    const FIELDS: &'static [&'static str];
    /// The kernel file under `shaders/` that declares the matching `Params`.
    const WGSL_FILE: &'static str;
}

macro_rules! kernel_params {
    ($(#[$doc:meta])* $name:ident in $file:literal { $($(#[$fdoc:meta])* $field:ident),* $(,)? } pad $pad:literal) => {
        $(#[$doc])*
        #[repr(C)]
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
        pub struct $name {
            $($(#[$fdoc])* pub $field: u32,)*
            pub _pad: [u32; $pad],
        }
        impl KernelParams for $name {
            const FIELDS: &'static [&'static str] = &[$(stringify!($field)),*];
            const WGSL_FILE: &'static str = $file;
        }
    };
}

kernel_params! {
    /// `shaders/bitplane.wgsl`: one workgroup per 4 KB chunk.
    BitplaneParams in "bitplane.wgsl" {
        n_chunks, n_blocks,
        /// Also the compile-time `W`.
        width,
        raw_len,
        /// Workgroups in x of the 2-D grid.
        chunks_x,
    } pad 3
}

kernel_params! {
    /// `shaders/ibp.wgsl`: a workgroup per `64 / lanes` output rows, one more for the tail.
    IbpParams in "ibp.wgsl" {
        columns, width, n_out, n_rows,
        /// Byte offsets in the uploaded group: mask words (bitval words follow), row bitmask,
        /// tail bytes.
        mask_off, bitmask_off, tail_off, tail_len,
        rows_x,
        /// Invocations per row (a power of two up to 64).
        lanes,
        /// This pass's entries of `row_ids`: `count` of them from entry `first`. An entry is
        /// one word (the stored row; output row = entry index) when `id_stride` is 1, or two
        /// (stored row, output row) when it is 2: a stream with clusters is decoded in one
        /// pass per cluster, each pass's rows sharing its mask.
        first, count, id_stride,
    } pad 3
}

kernel_params! {
    /// `shaders/rans.wgsl`: one workgroup per chunk.
    RansParams in "rans.wgsl" {
        n_chunks, chunks_x, chunk_elems, elems, scratch_words, mask_at,
        /// Word offset of a modelled chunk's context tables in its scratch region.
        model_at,
        rotate, tail, tail_len,
        /// Version 4: where the stream's plane-1 context tables start in `chunk_off` (after
        /// the chunk offsets, in words); 0 when it has none.
        ctx_at,
        /// 1 if the stream's frequency tables are compact (flag bit 2).
        compact_tables,
        /// Version 6: where the stream's plane-0 row tables start in `chunk_off` (laid out as
        /// the context tables, indexed by the plane-0 byte one row up); 0 when it has none.
        row_at,
        /// Version 6: the row distance `U`, and the table of the first row's context
        /// (`CTX_ABSENT` if none).
        row_distance, row_first,
        /// Version 7: 1 if a row plane's lane count `k` may be any up to `U` (else it must
        /// divide `U`).
        row_across,
        /// 1 if a modelled chunk's scratch holds its decode slots after its rank tables
        /// (`crate::rans::MODEL_SLOT_WORDS`); 0: the lanes search the ranks.
        model_slots,
        /// Version 8: where the stream's plane-1 sign tables start in `chunk_off` (three
        /// indices by plane-0 byte, one per class of the symbol one row up, then the tables);
        /// 0 when it has none.
        sign_at,
        /// `RansPhase::Other`: its chunks, `n_other` chunk indices from word `other_at` of
        /// `chunk_off` (every chunk of a mode `rans::other_mode` names).
        other_at, n_other,
    } pad 0
}

kernel_params! {
    /// `shaders/rans_rows.wgsl`: the row map's placement pass.
    RansRowsParams in "rans_rows.wgsl" { len, row_bytes, n_words, groups_x } pad 0
}

kernel_params! {
    /// `shaders/rans_count.wgsl`: one workgroup per chunk or rotation sample.
    RansCountParams in "rans_count.wgsl" { n_jobs, jobs_x, write_out, hist_stride, wide } pad 3
}

kernel_params! {
    /// `shaders/rans_lanes.wgsl`: one invocation per coded lane.
    RansLanesParams in "rans_lanes.wgsl" { n_jobs, jobs_x, rotate } pad 1
}

kernel_params! {
    /// `shaders/rans_assemble.wgsl`: one invocation per output word.
    RansAssembleParams in "rans_assemble.wgsl" {
        n_segs, n_words, groups_x, total, rotate,
        /// Word offset of the literal bytes in their buffer (the block index comes first).
        lit_at,
    } pad 2
}

kernel_params! {
    /// `shaders/copy.wgsl`: the speed reference.
    CopyParams in "copy.wgsl" { n_words, groups_x } pad 2
}

kernel_params! {
    /// `shaders/bitplane_encode.wgsl`: one workgroup per 4 KB chunk.
    BitplaneEncodeParams in "bitplane_encode.wgsl" { n_chunks, n_blocks, raw_len, chunks_x } pad 0
}

kernel_params! {
    /// `shaders/ibp_count.wgsl`: a column per invocation, a strip of rows per workgroup row.
    IbpCountParams in "ibp_count.wgsl" { columns, n_rows, strip, cols_x } pad 0
}

kernel_params! {
    /// `shaders/ibp_score.wgsl`: 64 rows per workgroup, the candidate in z.
    IbpScoreParams in "ibp_score.wgsl" { columns, n_rows, rows_x, groups, candidates } pad 3
}

kernel_params! {
    /// `shaders/ibp_pack.wgsl`: a row per invocation.
    IbpPackParams in "ibp_pack.wgsl" {
        columns, n_rows, rows_x,
        /// `H / B` units of the participation bitmap.
        header_units,
    } pad 0
}

kernel_params! {
    /// `shaders/ibp_condense.wgsl`: an output word per invocation.
    IbpCondenseParams in "ibp_condense.wgsl" { n_rows, row_bytes, n_words, groups_x } pad 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bits_are_distinct_single_bits() {
        let mut all = 0;
        for (_, b, _) in ERRORS {
            assert!(b.is_power_of_two());
            assert_eq!(all & b, 0);
            all |= b;
        }
    }

    #[test]
    fn the_sweep_fits_the_score_kernel() {
        assert!(planepack_ibp::internals::SWEEP.len() as u32 <= IBP_MAX_CANDIDATES);
    }

    #[test]
    fn the_kernel_tests_of_mode_ranges_hold() {
        // bitplane.wgsl tests `MODE_BX <= tag <= MODE_ZBX` for "a plane-coded mode".
        assert_eq!(Mode::Dbx as u32, Mode::Bx as u32 + 1);
        assert_eq!(Mode::Zbx as u32, Mode::Bx as u32 + 2);
        assert_eq!(
            Mode::ALL.iter().map(|&m| m as u32).max(),
            Some(Mode::Zero as u32)
        );
        assert_eq!(
            planepack_bitplane::TABLE_ENTRY_BITS as u32 - TAG_BITS,
            u32::BITS - (planepack_bitplane::block::RAW_BITS - 1).leading_zeros()
        );
    }
}
