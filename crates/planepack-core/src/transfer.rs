//! The link cost model of PlaneZip's equation (2).
//!
//! Moving `m` raw bytes one way over a link of bandwidth `g` with a codec of ratio `c` whose
//! encoder or decoder runs at `B` bytes/s of raw data, pipelined with the link:
//!
//! ```text
//! time = min( m/g , max( m/(c*g) , m/B ) )
//! ```
//!
//! The outer `min` is the bypass: when compression would be slower than sending raw bytes, the
//! tensor is sent raw. Inside, the slower of the link (on compressed bytes) and the codec (on
//! raw bytes) sets the pace. Effective bandwidth is `m / time`.

/// A link preset: a name and a one-direction bandwidth in GB/s (10^9 bytes/s).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    pub name: &'static str,
    pub gbps: f64,
}

/// PCIe x16 presets, one direction. Theoretical rates are 128b/130b line rates; "typical"
/// are host-to-device copies as commonly measured with pinned memory (about 80-88% of line).
pub const LINKS: &[Link] = &[
    Link {
        name: "pcie3-x16-theoretical",
        gbps: 15.75,
    },
    Link {
        name: "pcie3-x16-typical",
        gbps: 12.0,
    },
    Link {
        name: "pcie4-x16-theoretical",
        gbps: 31.5,
    },
    Link {
        name: "pcie4-x16-typical",
        gbps: 25.0,
    },
    Link {
        name: "pcie5-x16-theoretical",
        gbps: 63.0,
    },
    Link {
        name: "pcie5-x16-typical",
        gbps: 53.0,
    },
];

/// Seconds to move `raw_bytes` one way with ratio `ratio` and codec throughput `codec_gbps`
/// (GB/s of raw bytes) over a link of `link_gbps`.
pub fn transfer_seconds(raw_bytes: f64, ratio: f64, link_gbps: f64, codec_gbps: f64) -> f64 {
    let raw = raw_bytes / (link_gbps * 1e9);
    let compressed = raw_bytes / (ratio * link_gbps * 1e9);
    let codec = raw_bytes / (codec_gbps * 1e9);
    raw.min(compressed.max(codec))
}

/// Effective bandwidth in GB/s of raw data delivered: `min(g, max... )` inverted, i.e.
/// `max(g, min(c*g, B))`.
pub fn effective_gbps(ratio: f64, link_gbps: f64, codec_gbps: f64) -> f64 {
    link_gbps.max((ratio * link_gbps).min(codec_gbps))
}

/// Whether compression pays on this link (the bypass is not taken).
pub fn compression_pays(ratio: f64, link_gbps: f64, codec_gbps: f64) -> bool {
    (ratio * link_gbps).min(codec_gbps) > link_gbps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * a.abs().max(1.0)
    }

    #[test]
    fn link_bound_uses_ratio() {
        // PlaneZip's setting: 24 GB/s link, 64 GB/s engine, BF16 geomean 1.71 -> 41.04 GB/s.
        assert!(close(effective_gbps(1.71, 24.0, 64.0), 1.71 * 24.0));
        assert!(close(effective_gbps(1.39, 24.0, 64.0), 1.39 * 24.0));
    }

    #[test]
    fn decoder_bound_caps_at_codec_speed() {
        // Ratio 3 would give 72 GB/s, but the engine only does 64.
        assert!(close(effective_gbps(3.0, 24.0, 64.0), 64.0));
    }

    #[test]
    fn bypass_when_codec_slower_than_link() {
        // A 10 GB/s decoder on a 24 GB/s link: send raw.
        assert!(!compression_pays(2.0, 24.0, 10.0));
        assert!(close(effective_gbps(2.0, 24.0, 10.0), 24.0));
        let t = transfer_seconds(24e9, 2.0, 24.0, 10.0);
        assert!(close(t, 1.0));
    }

    #[test]
    fn time_and_bandwidth_agree() {
        for &(c, g, b) in &[(1.5, 24.0, 64.0), (1.0, 12.0, 5.0), (4.0, 53.0, 100.0)] {
            let m = 1e9;
            assert!(close(
                m / transfer_seconds(m, c, g, b) / 1e9,
                effective_gbps(c, g, b)
            ));
        }
    }
}
