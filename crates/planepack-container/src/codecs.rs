//! The codecs a container entry can name, how they are spelled, and how an entry's element
//! type is chosen: the one catalogue of codecs (the harness, the command and `auto` all take
//! their codecs from here, so whatever `bench` measures, `compress --codec` can write).
//!
//! A codec id is part of the file format: ids are never reused. The parameters a decoder
//! needs (element width, zstd level, Blosc2's filter and typesize) travel inside each codec's
//! own stream; the entry repeats the element type and level so that `inspect` can show them
//! without decoding.

use planepack_baselines::{Blosc2, Blosc2Filter, Blosc2Inner, Lz4, Raw, Zstd, Zvc};
use planepack_bitplane::BitPlane;
use planepack_core::{Codec, ElemType};
use planepack_ibp::Ibp;
use planepack_rans::Rans;

/// zstd level used by `--codec zstd` and by `auto`.
pub const ZSTD_LEVEL: u8 = 3;
/// Clusters of `--codec ibp-clusters` (`ibp-clusters-N` for others).
pub const IBP_CLUSTERS: u8 = 4;
/// The cluster counts `auto` tries besides one mask (`cargo xtask ibp-clusters`: the best C
/// per dataset was 2, 4 or 8 where more than one mask paid).
pub const AUTO_IBP_CLUSTERS: [u8; 3] = [2, 4, 8];

/// Codec family of one container entry (the level, where one applies, is stored beside it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CodecId {
    /// Stored verbatim: the payload is the raw bytes.
    Raw = 0,
    BitPlane = 1,
    Ibp = 2,
    Zstd = 3,
    Lz4 = 4,
    Zvc = 5,
    /// C-Blosc2 chunks (one per tensor) with this filter and codec.
    Blosc2ShuffleLz4 = 6,
    Blosc2BitShuffleLz4 = 7,
    Blosc2ShuffleZstd = 8,
    Blosc2BitShuffleZstd = 9,
    /// The byte-plane rANS codec (`planepack-rans`).
    Rans = 10,
    /// IBP with one mask per k-means cluster of rows; the level is the most clusters.
    IbpClusters = 11,
}

impl CodecId {
    /// Every id, in the order `auto` and tables list them (raw first, so it wins ties).
    pub const ALL: [CodecId; 12] = [
        CodecId::Raw,
        CodecId::BitPlane,
        CodecId::Ibp,
        CodecId::IbpClusters,
        CodecId::Rans,
        CodecId::Zstd,
        CodecId::Lz4,
        CodecId::Zvc,
        CodecId::Blosc2ShuffleLz4,
        CodecId::Blosc2BitShuffleLz4,
        CodecId::Blosc2ShuffleZstd,
        CodecId::Blosc2BitShuffleZstd,
    ];

    pub fn from_u8(v: u8) -> Option<CodecId> {
        CodecId::ALL.into_iter().find(|c| *c as u8 == v)
    }

    /// The family's name, without a level.
    pub fn name(self) -> &'static str {
        match self {
            CodecId::Raw => "raw",
            CodecId::BitPlane => "bitplane",
            CodecId::Ibp => "ibp",
            CodecId::IbpClusters => "ibp-clusters",
            CodecId::Rans => "rans",
            CodecId::Zstd => "zstd",
            CodecId::Lz4 => "lz4",
            CodecId::Zvc => "zvc",
            CodecId::Blosc2ShuffleLz4 => "blosc2-shuffle-lz4",
            CodecId::Blosc2BitShuffleLz4 => "blosc2-bitshuffle-lz4",
            CodecId::Blosc2ShuffleZstd => "blosc2-shuffle-zstd",
            CodecId::Blosc2BitShuffleZstd => "blosc2-bitshuffle-zstd",
        }
    }

    /// `(default, lowest, highest)` level of a family that has levels.
    pub fn levels(self) -> Option<(u8, u8, u8)> {
        match self {
            CodecId::Zstd => Some((ZSTD_LEVEL, 1, 22)),
            // Clusters: 2 to 16 (more have not paid on any of our datasets).
            CodecId::IbpClusters => Some((IBP_CLUSTERS, 2, 16)),
            // 0: 64 KiB chunks; 1: the chunk size searched per tensor (`Rans::chunk_search`).
            CodecId::Rans => Some((0, 0, 1)),
            CodecId::Blosc2ShuffleLz4
            | CodecId::Blosc2BitShuffleLz4
            | CodecId::Blosc2ShuffleZstd
            | CodecId::Blosc2BitShuffleZstd => {
                Some((planepack_baselines::BLOSC2_DEFAULT_LEVEL, 1, 9))
            }
            _ => None,
        }
    }
}

/// A codec with its level: what an entry stores and what a name on the command line means.
/// Spelled `family` or `family-level` (`zstd`, `zstd-19`, `blosc2-shuffle-zstd-9`); a family
/// without levels has level 0, and a family whose levels start at 0 (`rans`) is spelled
/// without its level 0 (`rans`, `rans-1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CodecSpec {
    pub id: CodecId,
    pub level: u8,
}

impl serde::Serialize for CodecId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl serde::Serialize for CodecSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name())
    }
}

impl<'de> serde::Deserialize<'de> for CodecSpec {
    /// The spelling [`CodecSpec::parse`] takes; an unknown one is an error.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        CodecSpec::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("unknown codec {s:?}")))
    }
}

impl From<CodecId> for CodecSpec {
    /// The family at its default level.
    fn from(id: CodecId) -> Self {
        CodecSpec {
            id,
            level: id.levels().map_or(0, |l| l.0),
        }
    }
}

impl CodecSpec {
    /// The codecs `auto` tries, in order (raw first, so it wins ties; IBP with clusters last,
    /// after IBP with one mask, so clusters are chosen only where they are smaller, and
    /// `select` can skip them where one mask is far from the best).
    pub fn auto_candidates() -> Vec<CodecSpec> {
        let mut v: Vec<CodecSpec> = [
            CodecId::Raw,
            CodecId::BitPlane,
            CodecId::Ibp,
            CodecId::Rans,
            CodecId::Zstd,
            CodecId::Lz4,
            CodecId::Zvc,
        ]
        .into_iter()
        .map(CodecSpec::from)
        .collect();
        v.extend(AUTO_IBP_CLUSTERS.map(|level| CodecSpec {
            id: CodecId::IbpClusters,
            level,
        }));
        v
    }

    /// The codecs the comparison harness measures, in table order: ours (`rans` at its default
    /// and with its chunk size searched, its ratio end), then what users reach for instead
    /// (zstd at its fast, default and best levels; LZ4; cDMA's ZVC; the real C-Blosc2 at its
    /// default level 5 and, with zstd, its best-ratio level 9).
    pub fn bench_set() -> Vec<CodecSpec> {
        let at = |id, level| CodecSpec { id, level };
        vec![
            at(CodecId::Rans, 0),
            at(CodecId::Rans, 1),
            at(CodecId::BitPlane, 0),
            at(CodecId::Ibp, 0),
            at(CodecId::Raw, 0),
            at(CodecId::Zvc, 0),
            at(CodecId::Zstd, 1),
            at(CodecId::Zstd, 3),
            at(CodecId::Zstd, 19),
            at(CodecId::Lz4, 0),
            at(CodecId::Blosc2ShuffleLz4, 5),
            at(CodecId::Blosc2BitShuffleLz4, 5),
            at(CodecId::Blosc2ShuffleZstd, 5),
            at(CodecId::Blosc2ShuffleZstd, 9),
            at(CodecId::Blosc2BitShuffleZstd, 5),
            at(CodecId::Blosc2BitShuffleZstd, 9),
        ]
    }

    /// The name used on the command line, in tables and in records.
    pub fn name(self) -> String {
        match self.id.levels() {
            Some((_, 0, _)) if self.level == 0 => self.id.name().to_owned(),
            Some(_) => format!("{}-{}", self.id.name(), self.level),
            None => self.id.name().to_owned(),
        }
    }

    /// Parse `family` or `family-level`; `None` for an unknown family or a level out of range.
    pub fn parse(s: &str) -> Option<CodecSpec> {
        if let Some(id) = CodecId::ALL.into_iter().find(|c| c.name() == s) {
            return Some(id.into());
        }
        let (family, level) = s.rsplit_once('-')?;
        let id = CodecId::ALL.into_iter().find(|c| c.name() == family)?;
        let (_, lo, hi) = id.levels()?;
        let level: u8 = level.parse().ok()?;
        (lo..=hi)
            .contains(&level)
            .then_some(CodecSpec { id, level })
    }

    /// Every spelling `parse` takes, for help and error messages.
    pub fn spellings() -> String {
        CodecId::ALL
            .iter()
            .map(|c| match c.levels() {
                Some((_, lo, hi)) => format!("{}[-{lo}..{hi}]", c.name()),
                None => c.name().to_owned(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The codec behind the spec.
    pub fn codec(self) -> Box<dyn Codec> {
        let blosc2 = |filter, inner| Box::new(Blosc2::new(filter, inner, self.level));
        match self.id {
            CodecId::Raw => Box::new(Raw),
            CodecId::BitPlane => Box::new(BitPlane::new()),
            CodecId::Ibp => Box::new(Ibp::default()),
            CodecId::IbpClusters => Box::new(Ibp {
                clusters: self.level.into(),
                ..Ibp::default()
            }),
            CodecId::Rans if self.level == 1 => Box::new(Rans::SEARCH),
            CodecId::Rans => Box::new(Rans::DEFAULT),
            CodecId::Zstd => Box::new(Zstd {
                level: self.level as i32,
            }),
            CodecId::Lz4 => Box::new(Lz4),
            CodecId::Zvc => Box::new(Zvc),
            CodecId::Blosc2ShuffleLz4 => blosc2(Blosc2Filter::Shuffle, Blosc2Inner::Lz4),
            CodecId::Blosc2BitShuffleLz4 => blosc2(Blosc2Filter::BitShuffle, Blosc2Inner::Lz4),
            CodecId::Blosc2ShuffleZstd => blosc2(Blosc2Filter::Shuffle, Blosc2Inner::Zstd),
            CodecId::Blosc2BitShuffleZstd => blosc2(Blosc2Filter::BitShuffle, Blosc2Inner::Zstd),
        }
    }

    /// Whether the codec splits one tensor's chunks over rayon's pool (its parallel encoder and
    /// decoder): then a large part uses every core, and parts coded at once (themselves on
    /// rayon's threads) share that pool without oversubscribing it. C-Blosc2's parallel
    /// decoder starts threads of its own, so the container keeps it to one core per part.
    pub fn splits_on_rayon(self) -> bool {
        matches!(self.id, CodecId::Rans | CodecId::BitPlane)
    }

    /// Whether planepack has a GPU decoder for this codec.
    pub fn gpu_decoder(self) -> bool {
        matches!(
            self.id,
            CodecId::BitPlane | CodecId::Ibp | CodecId::IbpClusters | CodecId::Rans
        )
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
