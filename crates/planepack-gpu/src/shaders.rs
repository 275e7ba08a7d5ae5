//! The WGSL kernels, how they are assembled, and their validation and translation by naga.
//!
//! Each decoder is `shaders/common.wgsl` (error bits, bounds-checked stream reads), one kernel
//! file and one of two scan files (`shaders/scan_subgroup.wgsl`,
//! `shaders/scan_workgroup.wgsl`) that provide the entry point and a workgroup prefix sum: the
//! subgroup path for adapters with `Features::SUBGROUP`, the workgroup-memory path for the
//! others. Both are validated here for every backend wgpu targets (SPIR-V for Vulkan, MSL for
//! Metal, HLSL for DX12), so a shader one backend cannot take fails in our tests and in
//! `cargo xtask shaders`, not on a user's machine. No `override` constants are used, so no
//! pipeline-constant pass is needed before the writers.

use naga::valid::{Capabilities, ModuleInfo, ValidationFlags, Validator};

/// A decoder kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// The bit-plane decoder for elements of `width` bits (8, 16 or 32), one pipeline each.
    BitPlane {
        width: u32,
    },
    /// The IBP decoder for chunks of `width` bits (16, 32 or 64): each width is its own
    /// pipeline, so the kernel's width tests fold away at compile time.
    Ibp {
        width: u32,
    },
    /// The rANS byte-plane decoder for elements of `width` bytes (1, 2 or 4).
    Rans {
        width: u32,
    },
    /// The rANS row map's placement pass (no scan).
    RansRows,
    Copy,
}

/// The chunk widths the IBP kernel is built for.
pub const IBP_WIDTHS: [u32; 3] = [16, 32, 64];

/// The element widths the bit-plane kernel is built for.
pub const BITPLANE_WIDTHS: [u32; 3] = [8, 16, 32];

/// The element widths (bytes) the rANS kernel is built for.
pub const RANS_WIDTHS: [u32; 3] = [1, 2, 4];

/// How a kernel computes its prefix sums.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScanPath {
    Subgroup,
    Workgroup,
}

const COMMON: &str = include_str!("../../../shaders/common.wgsl");
const BITPLANE: &str = include_str!("../../../shaders/bitplane.wgsl");
const IBP: &str = include_str!("../../../shaders/ibp.wgsl");
const RANS: &str = include_str!("../../../shaders/rans.wgsl");
const RANS_ROWS: &str = include_str!("../../../shaders/rans_rows.wgsl");
const COPY: &str = include_str!("../../../shaders/copy.wgsl");
const SCAN_SUBGROUP: &str = include_str!("../../../shaders/scan_subgroup.wgsl");
const SCAN_WORKGROUP: &str = include_str!("../../../shaders/scan_workgroup.wgsl");

/// The WGSL source of a kernel on a path (the copy kernel has no scan).
pub fn source(kernel: Kernel, path: ScanPath) -> String {
    let (consts, body) = match kernel {
        Kernel::BitPlane { width } => (
            // RUN_BITS: the zero-run field, bits_for(W - 1).
            format!(
                "const W: u32 = {width}u;\nconst RUN_BITS: u32 = {}u;\n",
                u32::BITS - (width - 2).leading_zeros()
            ),
            BITPLANE,
        ),
        Kernel::Ibp { width } => (
            format!(
                "const W: u32 = {width}u;\nconst PER: u32 = {}u;\n",
                if width == 16 { 2 } else { 1 }
            ),
            IBP,
        ),
        Kernel::Rans { width } => (format!("const W: u32 = {width}u;\n"), RANS),
        Kernel::RansRows => return RANS_ROWS.to_owned(),
        Kernel::Copy => return COPY.to_owned(),
    };
    let scan = match path {
        ScanPath::Subgroup => SCAN_SUBGROUP,
        ScanPath::Workgroup => SCAN_WORKGROUP,
    };
    format!("{consts}{COMMON}\n{body}\n{scan}")
}

/// Every shader the crate builds: (name, source, needs subgroups).
pub fn all() -> Vec<(String, String, bool)> {
    let mut v = Vec::new();
    let kernels = BITPLANE_WIDTHS
        .iter()
        .map(|&width| (Kernel::BitPlane { width }, format!("bitplane{width}")))
        .chain(
            IBP_WIDTHS
                .iter()
                .map(|&width| (Kernel::Ibp { width }, format!("ibp{width}"))),
        )
        .chain(
            RANS_WIDTHS
                .iter()
                .map(|&width| (Kernel::Rans { width }, format!("rans{width}"))),
        );
    for (k, name) in kernels {
        v.push((
            format!("{name}-subgroup"),
            source(k, ScanPath::Subgroup),
            true,
        ));
        v.push((
            format!("{name}-workgroup"),
            source(k, ScanPath::Workgroup),
            false,
        ));
    }
    v.push((
        "rans-rows".into(),
        source(Kernel::RansRows, ScanPath::Workgroup),
        false,
    ));
    v.push((
        "copy".into(),
        source(Kernel::Copy, ScanPath::Workgroup),
        false,
    ));
    v
}

/// Parse and validate, with subgroup operations allowed only when `subgroups`.
pub fn validate(src: &str, subgroups: bool) -> Result<(naga::Module, ModuleInfo), String> {
    let module = naga::front::wgsl::parse_str(src).map_err(|e| e.emit_to_string(src))?;
    let caps = if subgroups {
        Capabilities::SUBGROUP
    } else {
        Capabilities::empty()
    };
    let mut v = Validator::new(ValidationFlags::all(), caps);
    if subgroups {
        v.subgroup_stages(naga::valid::ShaderStages::COMPUTE)
            .subgroup_operations(naga::valid::SubgroupOperationSet::all());
    }
    let info = v.validate(&module).map_err(|e| e.emit_to_string(src))?;
    Ok((module, info))
}

/// Sizes of the translations of one shader.
#[derive(Debug, Clone, Copy)]
pub struct Translated {
    pub spirv_words: usize,
    pub msl_bytes: usize,
    pub hlsl_bytes: usize,
}

/// Translate a validated module to SPIR-V, MSL and HLSL (entry point `main`).
pub fn translate(module: &naga::Module, info: &ModuleInfo) -> Result<Translated, String> {
    let stage = naga::ShaderStage::Compute;
    let spv_opts = naga::back::spv::Options {
        lang_version: (1, 3),
        ..Default::default()
    };
    let spv = naga::back::spv::write_vec(
        module,
        info,
        &spv_opts,
        Some(&naga::back::spv::PipelineOptions {
            shader_stage: stage,
            entry_point: "main".into(),
        }),
    )
    .map_err(|e| format!("SPIR-V: {e}"))?;
    let msl_opts = naga::back::msl::Options {
        lang_version: (2, 4),
        ..Default::default()
    };
    let (msl, _) = naga::back::msl::write_string(
        module,
        info,
        &msl_opts,
        &naga::back::msl::PipelineOptions {
            entry_point: Some((stage, "main".into())),
            ..Default::default()
        },
    )
    .map_err(|e| format!("MSL: {e}"))?;
    let hlsl_opts = naga::back::hlsl::Options {
        shader_model: naga::back::hlsl::ShaderModel::V6_0,
        ..Default::default()
    };
    let mut hlsl = String::new();
    naga::back::hlsl::Writer::new(
        &mut hlsl,
        &hlsl_opts,
        &naga::back::hlsl::PipelineOptions {
            entry_point: Some((stage, "main".into())),
        },
    )
    .write(module, info, None)
    .map_err(|e| format!("HLSL: {e}"))?;
    Ok(Translated {
        spirv_words: spv.len(),
        msl_bytes: msl.len(),
        hlsl_bytes: hlsl.len(),
    })
}
