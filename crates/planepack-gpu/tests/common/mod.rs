//! The device the GPU tests share.
//!
//! Without an adapter the tests skip with a message, except in CI (`CI` set), where a missing
//! adapter is a failure: CI installs lavapipe. CI's runs on other configurations say what they
//! expect (`PLANEPACK_EXPECT_BACKEND=gl`, `PLANEPACK_EXPECT_SUBGROUP_SIZE=4`), and a device
//! that does not match fails the tests, so a run meant for GL or 4-lane subgroups cannot pass
//! on something else.

use planepack_gpu::{Gpu, GpuOptions};
use std::sync::OnceLock;

pub fn gpu() -> Option<&'static Gpu> {
    static GPU: OnceLock<Option<Gpu>> = OnceLock::new();
    GPU.get_or_init(|| match Gpu::new(&GpuOptions::from_env()) {
        Ok(g) => {
            eprintln!("GPU tests on {}", g.describe());
            let info = g.adapter_info();
            if let Ok(want) = std::env::var("PLANEPACK_EXPECT_BACKEND") {
                let got = format!("{:?}", info.backend).to_lowercase();
                assert_eq!(
                    got,
                    want,
                    "the tests were to run on {want}: {}",
                    g.describe()
                );
            }
            if let Ok(want) = std::env::var("PLANEPACK_EXPECT_SUBGROUP_SIZE") {
                let want: u32 = want.parse().expect("PLANEPACK_EXPECT_SUBGROUP_SIZE");
                assert!(
                    g.has_subgroups()
                        && info.subgroup_min_size == want
                        && info.subgroup_max_size == want,
                    "the tests were to run with subgroups of {want}: {}",
                    g.describe()
                );
            }
            Some(g)
        }
        Err(e) if std::env::var_os("CI").is_some() => {
            panic!("CI needs a GPU adapter (lavapipe): {e}")
        }
        Err(e) => {
            eprintln!("skipping GPU tests: {e} (install mesa-vulkan-drivers for lavapipe)");
            None
        }
    })
    .as_ref()
}
