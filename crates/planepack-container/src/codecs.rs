//! The codecs a container entry can name, and how an entry's element type is chosen.
//!
//! A codec id is part of the file format: ids are never reused. The parameters a decoder
//! needs (element width, zstd level) travel inside each codec's own stream; the entry repeats
//! the element type and level only so that `inspect` can show them without decoding.

use planepack_baselines::{Lz4, Raw, Zstd, Zvc};
use planepack_bitplane::BitPlane;
use planepack_core::{Codec, ElemType};
use planepack_ibp::Ibp;

/// zstd level used by `--codec zstd` and by `auto`.
pub const ZSTD_LEVEL: u8 = 3;

/// Codec of one container entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CodecId {
    /// Stored verbatim: the payload is the raw bytes.
    Raw = 0,
    BitPlane = 1,
    Ibp = 2,
    Zstd = 3,
    Lz4 = 4,
    Zvc = 5,
}

impl CodecId {
    /// Every codec, in the order `auto` tries them (raw first, so it wins ties).
    pub const ALL: [CodecId; 6] = [
        CodecId::Raw,
        CodecId::BitPlane,
        CodecId::Ibp,
        CodecId::Zstd,
        CodecId::Lz4,
        CodecId::Zvc,
    ];

    pub fn from_u8(v: u8) -> Option<CodecId> {
        CodecId::ALL.into_iter().find(|c| *c as u8 == v)
    }

    /// Name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            CodecId::Raw => "raw",
            CodecId::BitPlane => "bitplane",
            CodecId::Ibp => "ibp",
            CodecId::Zstd => "zstd",
            CodecId::Lz4 => "lz4",
            CodecId::Zvc => "zvc",
        }
    }

    pub fn from_name(s: &str) -> Option<CodecId> {
        CodecId::ALL.into_iter().find(|c| c.name() == s)
    }

    /// The codec behind the id.
    pub fn codec(self) -> Box<dyn Codec> {
        match self {
            CodecId::Raw => Box::new(Raw),
            CodecId::BitPlane => Box::new(BitPlane::new()),
            CodecId::Ibp => Box::new(Ibp::default()),
            CodecId::Zstd => Box::new(Zstd {
                level: ZSTD_LEVEL as i32,
            }),
            CodecId::Lz4 => Box::new(Lz4),
            CodecId::Zvc => Box::new(Zvc),
        }
    }

    /// The level byte stored in the entry.
    pub fn level(self) -> u8 {
        if self == CodecId::Zstd {
            ZSTD_LEVEL
        } else {
            0
        }
    }
}

/// The element type a codec sees for a dtype of `dtype_bits` bits per element.
///
/// Codecs only care about the width. 16- and 32-bit dtypes map to the float type of their
/// width (BF16 keeps BF16); 64-bit dtypes (F64, I64, U64, C64) are coded as pairs of 32-bit
/// words; 8-bit and narrower types as bytes.
pub fn elem_for(dtype: &str, dtype_bits: usize) -> ElemType {
    match (dtype, dtype_bits) {
        ("BF16", _) => ElemType::BF16,
        (_, 16) => ElemType::F16,
        (_, 32) | (_, 64) | (_, 128) => ElemType::F32,
        _ => ElemType::U8,
    }
}

/// Element type id stored in entries.
pub fn elem_id(e: ElemType) -> u8 {
    match e {
        ElemType::F32 => 0,
        ElemType::F16 => 1,
        ElemType::BF16 => 2,
        ElemType::U8 => 3,
    }
}

pub fn elem_from_id(v: u8) -> Option<ElemType> {
    ElemType::ALL.into_iter().find(|e| elem_id(*e) == v)
}
