//! Every codec the harness compares, in table order.

use planepack_bitplane::BitPlane;
use planepack_core::Codec;
use planepack_ibp::Ibp;

/// Our codecs first, then the baselines.
pub fn all() -> Vec<Box<dyn Codec>> {
    let mut v: Vec<Box<dyn Codec>> = vec![Box::new(BitPlane::new()), Box::new(Ibp::default())];
    v.extend(planepack_baselines::all());
    v
}

/// Codecs whose name contains any of `filters` (all when empty).
pub fn filtered(filters: &[String]) -> Vec<Box<dyn Codec>> {
    all()
        .into_iter()
        .filter(|c| filters.is_empty() || filters.iter().any(|f| c.name().contains(f.as_str())))
        .collect()
}
