//! PlaneZip's equation (2): the one-direction transfer time of a tensor of `m` bytes,
//! `x = min(m/γ, max(m/(c·γ), m/B))`. Compression and link overlap (a pipeline), so the
//! compressed path costs the slower of the link on compressed bytes and the engine on raw
//! bytes; the outer `min` sends the tensor raw when compression does not pay (the bypass).
//! The same formula holds for device-to-host (compress, send) and host-to-device (send,
//! decompress); each direction has its own link queue in the simulator.
//!
//! The formula itself is written once, in [`planepack_core::transfer`]; this is the
//! simulator's spelling of it (whole bytes).

/// Seconds to move `bytes` one way with ratio `ratio` over `link_gbps` with an engine of
/// `engine_gbps` (all GB/s = 10^9 bytes/s).
pub fn transfer_seconds(bytes: u64, ratio: f64, link_gbps: f64, engine_gbps: f64) -> f64 {
    planepack_core::transfer::transfer_seconds(bytes as f64, ratio, link_gbps, engine_gbps)
}
