//! Every shader parses, validates with exactly the capabilities it needs, and translates to
//! SPIR-V, MSL and HLSL.

use planepack_gpu::shaders::{all, translate, validate};

#[test]
fn every_shader_validates_and_translates_for_every_backend() {
    for (name, src, subgroups) in all() {
        let (module, info) = validate(&src, subgroups).unwrap_or_else(|e| panic!("{name}: {e}"));
        let t = translate(&module, &info).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            t.spirv_words > 0 && t.msl_bytes > 0 && t.hlsl_bytes > 0,
            "{name}"
        );
    }
}

#[test]
fn subgroup_shaders_need_the_capability_and_the_others_do_not() {
    for (name, src, subgroups) in all() {
        assert_eq!(validate(&src, false).is_ok(), !subgroups, "{name}");
    }
}
