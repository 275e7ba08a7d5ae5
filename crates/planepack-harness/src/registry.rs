//! The codecs the harness compares, in table order: the container's catalogue
//! ([`CodecSpec::bench_set`]), so that whatever is measured can also be written with
//! `planepack compress --codec <name>`.

use planepack_container::CodecSpec;

/// Every codec the harness measures by default.
pub fn all() -> Vec<CodecSpec> {
    CodecSpec::bench_set()
}

/// The codecs named in `names` (exact names as tables print them, e.g. `zstd-19`,
/// `blosc2-shuffle-zstd-5`; a family alone means its default level), or all when empty.
pub fn named(names: &[String]) -> anyhow::Result<Vec<CodecSpec>> {
    if names.is_empty() {
        return Ok(all());
    }
    names
        .iter()
        .map(|n| {
            CodecSpec::parse(n.trim()).ok_or_else(|| {
                anyhow::anyhow!(
                    "unknown codec {n:?}; codecs are: {}",
                    CodecSpec::spellings()
                )
            })
        })
        .collect()
}
