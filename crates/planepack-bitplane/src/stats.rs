//! What the encoder did: blocks per mode, bits per mode, and the cost of each place where the
//! format deviates from PlaneZip's published layout, so that the deviations can be measured
//! on real data rather than argued about.

use crate::block::Mode;
use std::fmt;

/// Encoder statistics for one or more tensors (they add up).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Blocks coded in each mode, indexed by tag.
    pub blocks: [u64; 6],
    /// Payload bits of the blocks in each mode, indexed by tag.
    pub payload_bits: [u64; 6],
    pub chunks: u64,
    pub raw_bytes: u64,
    /// Everything: stream header, chunk headers, tables, payloads, padding.
    pub compressed_bytes: u64,
    /// Stream header and chunk length headers.
    pub header_bytes: u64,
    /// Block tables (tag + length per block).
    pub table_bits: u64,
    /// Zero bits that round each chunk up to a byte.
    pub pad_bits: u64,
    /// What the same choices would take in PlaneZip's layout as we know it: 16-bit chunk
    /// header, 3-bit tags only, no per-block length fields.
    pub paper_layout_bytes: u64,
}

impl Stats {
    pub fn ratio(&self) -> f64 {
        self.raw_bytes as f64 / self.compressed_bytes.max(1) as f64
    }

    /// Ratio if the per-block length fields (a GPU-decoding aid) were dropped.
    pub fn paper_layout_ratio(&self) -> f64 {
        self.raw_bytes as f64 / self.paper_layout_bytes.max(1) as f64
    }

    /// Bits the ZERO mode saved over the best of PlaneZip's own modes for those blocks
    /// (ZVC with an empty mask: one mask bit per element).
    pub fn zero_mode_saved_bits(&self, elem_bits: u32) -> u64 {
        self.blocks[Mode::Zero as usize] * (1024 / elem_bits as u64)
    }

    pub fn total_blocks(&self) -> u64 {
        self.blocks.iter().sum()
    }

    /// Add another tensor's statistics.
    pub fn add(&mut self, o: &Stats) {
        for i in 0..6 {
            self.blocks[i] += o.blocks[i];
            self.payload_bits[i] += o.payload_bits[i];
        }
        self.chunks += o.chunks;
        self.raw_bytes += o.raw_bytes;
        self.compressed_bytes += o.compressed_bytes;
        self.header_bytes += o.header_bytes;
        self.table_bits += o.table_bits;
        self.pad_bits += o.pad_bits;
        self.paper_layout_bytes += o.paper_layout_bytes;
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total = self.total_blocks().max(1) as f64;
        write!(
            f,
            "ratio {:.3} (paper layout {:.3}); blocks:",
            self.ratio(),
            self.paper_layout_ratio()
        )?;
        for m in Mode::ALL {
            let n = self.blocks[m as usize];
            if n > 0 {
                write!(f, " {} {:.1}%", m.name(), 100.0 * n as f64 / total)?;
            }
        }
        Ok(())
    }
}
