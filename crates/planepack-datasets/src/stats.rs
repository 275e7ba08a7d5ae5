//! The first statistics a reader wants about a tensor before any codec touches it.

use crate::Tensor;

/// Zero fraction and per-byte-position entropy of a set of tensors of one element width.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorStats {
    pub elements: u64,
    /// Elements whose bits are all zero.
    pub zero_fraction: f64,
    /// Shannon entropy (bits) of byte `j` of each element, `j` = 0 (least significant) upward.
    pub byte_entropy: Vec<f64>,
}

impl TensorStats {
    /// Statistics over `tensors`, all of element size `size` bytes.
    pub fn of<'a>(tensors: impl IntoIterator<Item = &'a Tensor>, size: usize) -> TensorStats {
        let mut hist = vec![[0u64; 256]; size];
        let (mut elements, mut zeros) = (0u64, 0u64);
        for t in tensors {
            for e in t.data.chunks_exact(size) {
                elements += 1;
                zeros += e.iter().all(|&b| b == 0) as u64;
                for (h, &b) in hist.iter_mut().zip(e) {
                    h[b as usize] += 1;
                }
            }
        }
        let n = elements.max(1) as f64;
        let byte_entropy = hist
            .iter()
            .map(|h| {
                h.iter()
                    .filter(|&&c| c > 0)
                    .map(|&c| {
                        let p = c as f64 / n;
                        -p * p.log2()
                    })
                    .sum()
            })
            .collect();
        TensorStats {
            elements,
            zero_fraction: zeros as f64 / n,
            byte_entropy,
        }
    }

    /// Bits per element an order-0 coder of each byte position would need, over the raw bits.
    pub fn entropy_fraction(&self) -> f64 {
        self.byte_entropy.iter().sum::<f64>() / (8.0 * self.byte_entropy.len().max(1) as f64)
    }
}
