//! The device the GPU tests share.
//!
//! Without an adapter the tests skip with a message, except in CI (`CI` set), where a missing
//! adapter is a failure: CI installs lavapipe.

use planepack_gpu::{Gpu, GpuOptions};
use std::sync::OnceLock;

pub fn gpu() -> Option<&'static Gpu> {
    static GPU: OnceLock<Option<Gpu>> = OnceLock::new();
    GPU.get_or_init(|| match Gpu::new(&GpuOptions::from_env()) {
        Ok(g) => {
            eprintln!("GPU tests on {}", g.describe());
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
