//! Every shader parses, validates with exactly the capabilities it needs, and translates to
//! SPIR-V, MSL, HLSL and GLSL (`cargo xtask shaders` also runs the external validators).

use planepack_gpu::shaders::{all, translate, validate};

#[test]
fn every_shader_validates_and_translates_for_every_backend() {
    for (name, src, subgroups) in all() {
        let (module, info) = validate(&src, subgroups).unwrap_or_else(|e| panic!("{name}: {e}"));
        let t = translate(&module, &info).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            !t.spirv.is_empty() && !t.msl.is_empty() && !t.hlsl.is_empty() && !t.glsl.is_empty(),
            "{name}"
        );
    }
}

/// WebGPU guarantees every device 16 KiB of workgroup memory (`maxComputeWorkgroupStorageSize`)
/// and the kernels are written for that. The host asks for the adapter's own limits, and
/// lavapipe's are larger, so a kernel past 16 KiB would pass every GPU test in CI and fail to
/// build its pipeline on a device that offers the minimum: the budget is checked here, on
/// naga's layout of each kernel's `var<workgroup>` variables (the rANS decoder's stage ring
/// leaves it within 1 KiB of it).
#[test]
fn every_kernel_fits_webgpus_guaranteed_workgroup_memory() {
    const WEBGPU_MIN_WORKGROUP_STORAGE: u32 = 16384;
    for (name, src, subgroups) in all() {
        let (module, _) = validate(&src, subgroups).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut layouter = naga::proc::Layouter::default();
        layouter.update(module.to_ctx()).unwrap();
        let bytes: u32 = module
            .global_variables
            .iter()
            .filter(|(_, v)| v.space == naga::AddressSpace::WorkGroup)
            .map(|(_, v)| layouter[v.ty].size)
            .sum();
        assert!(
            bytes <= WEBGPU_MIN_WORKGROUP_STORAGE,
            "{name}: {bytes} bytes of workgroup memory"
        );
    }
}

#[test]
fn subgroup_shaders_need_the_capability_and_the_others_do_not() {
    for (name, src, subgroups) in all() {
        assert_eq!(validate(&src, false).is_ok(), !subgroups, "{name}");
    }
}

/// Each kernel's `Params` in WGSL, as naga reflects it, is the Rust `Pod` struct the host
/// uploads: the same fields in the same order at the same offsets, all `u32`, and the Rust
/// struct covers the WGSL one (its size rounded up to the uniform's 16 bytes).
#[test]
fn uniform_structs_match_their_rust_twins() {
    use planepack_gpu::contract::*;
    use planepack_gpu::{Kernel, ScanPath};

    fn check<P: KernelParams>(kernel: Kernel) {
        let src = planepack_gpu::shaders::source(kernel, ScanPath::Workgroup);
        let (module, _) = validate(&src, false).unwrap();
        let (members, span) = module
            .types
            .iter()
            .find_map(|(_, t)| match (&t.name, &t.inner) {
                (Some(n), naga::TypeInner::Struct { members, span }) if n == "Params" => {
                    Some((members.clone(), *span))
                }
                _ => None,
            })
            .unwrap_or_else(|| panic!("{}: no struct Params", P::WGSL_FILE));
        let names: Vec<&str> = members.iter().map(|m| m.name.as_deref().unwrap()).collect();
        assert_eq!(names, P::FIELDS, "{}", P::WGSL_FILE);
        for (i, m) in members.iter().enumerate() {
            assert_eq!(m.offset, 4 * i as u32, "{} {:?}", P::WGSL_FILE, m.name);
            assert!(
                matches!(
                    module.types[m.ty].inner,
                    naga::TypeInner::Scalar(naga::Scalar {
                        kind: naga::ScalarKind::Uint,
                        width: 4
                    })
                ),
                "{} {:?} is not u32",
                P::WGSL_FILE,
                m.name
            );
        }
        assert_eq!(
            std::mem::size_of::<P>(),
            (span as usize).next_multiple_of(16),
            "{}",
            P::WGSL_FILE
        );
    }
    check::<BitplaneParams>(Kernel::BitPlane { width: 16 });
    check::<IbpParams>(Kernel::Ibp {
        width: 32,
        lanes: 1,
    });
    check::<RansParams>(Kernel::Rans {
        width: 2,
        phase: planepack_gpu::RansPhase::Whole,
        lanes_across: true,
    });
    check::<RansRowsParams>(Kernel::RansRows);
    check::<CopyParams>(Kernel::Copy);
    check::<BitplaneEncodeParams>(Kernel::BitPlaneEncode { width: 8 });
    check::<IbpCountParams>(Kernel::IbpCount { width: 64 });
    check::<IbpScoreParams>(Kernel::IbpScore { width: 16 });
    check::<IbpPackParams>(Kernel::IbpPack { width: 32 });
    check::<IbpCondenseParams>(Kernel::IbpCondense);
    check::<RansCountParams>(Kernel::RansCount { width: 2 });
    check::<RansLanesParams>(Kernel::RansLanes { width: 4 });
    check::<RansAssembleParams>(Kernel::RansAssemble { width: 1 });
}

/// The error bits, mode tags and table layout come from Rust (`contract::wgsl_prelude`): no
/// kernel file restates them.
#[test]
fn shared_constants_are_defined_only_in_rust() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shaders");
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for line in text.lines() {
            let l = line.trim_start();
            for prefix in [
                "const ERR_",
                "const MODE_",
                "const TABLE_ENTRY_BITS",
                "const TAG_BITS",
                "const SRC_",
            ] {
                assert!(!l.starts_with(prefix), "{}: {line}", path.display());
            }
        }
    }
}
