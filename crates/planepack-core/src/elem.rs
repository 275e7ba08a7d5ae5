//! Element types of the tensors planepack moves.
//!
//! The codecs are lossless on bit patterns: they never do float arithmetic, so NaN payloads,
//! -0.0 and subnormals survive by construction. The element type only fixes the width that
//! bit planes, shuffles and zero tests work on.

use std::fmt;
use std::str::FromStr;

/// The dtype of a tensor, as far as a codec cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ElemType {
    F32,
    F16,
    BF16,
    /// 8-bit floats (E4M3 or E5M2) and plain bytes: width 8, nothing else matters.
    U8,
}

impl ElemType {
    /// All element types, in a stable order.
    pub const ALL: [ElemType; 4] = [ElemType::F32, ElemType::F16, ElemType::BF16, ElemType::U8];

    /// Width of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            ElemType::F32 => 4,
            ElemType::F16 | ElemType::BF16 => 2,
            ElemType::U8 => 1,
        }
    }

    /// Width of one element in bits.
    pub const fn bits(self) -> u32 {
        self.size() as u32 * 8
    }

    /// The canonical lower-case name (as in safetensors: `F32`, `BF16`, ... lower-cased).
    pub const fn name(self) -> &'static str {
        match self {
            ElemType::F32 => "f32",
            ElemType::F16 => "f16",
            ElemType::BF16 => "bf16",
            ElemType::U8 => "u8",
        }
    }
}

impl fmt::Display for ElemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ElemType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "float32" => Ok(ElemType::F32),
            "f16" | "float16" => Ok(ElemType::F16),
            "bf16" | "bfloat16" => Ok(ElemType::BF16),
            "u8" | "i8" | "f8" | "f8_e4m3" | "f8_e5m2" | "uint8" | "int8" => Ok(ElemType::U8),
            other => Err(format!("unknown element type {other:?}")),
        }
    }
}
