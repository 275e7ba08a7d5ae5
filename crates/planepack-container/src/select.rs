//! Choosing a codec per tensor.
//!
//! `auto` encodes the tensor with every codec, decodes each result (which both verifies it and
//! times the decoder on this very tensor), and keeps:
//!
//! * without a link: the smallest payload (raw wins ties, then the order of
//!   [`CodecSpec::auto_candidates`]);
//! * with a link of γ GB/s: the smallest one-direction transfer time of PlaneZip's equation (2),
//!   `min(m/γ, max(m/(c·γ), m/B))`, where `m` is the raw size, `c` the ratio and `B` the
//!   measured single-core decode throughput of that codec on that tensor. Raw (`m/γ`) is
//!   a candidate like any other, so compression is bypassed when it does not pay.
//!
//! IBP with clusters comes last and is tried only where IBP with one mask came within
//! [`CLUSTER_MARGIN`] of the smallest payload so far (clusters gained at most 2 % of the raw
//! size over one mask on our datasets), then by doubling: C = 2, 4 only if 2 was smaller than
//! one mask, 8 only if 4 was smaller than 2 (on every dataset of ours this finds the best of
//! 1, 2, 4, 8). Each clustered encode costs about what an IBP encode does, the slowest of
//! `auto`'s candidates, so they are spent only where they can win.
//!
//! B is measured on this machine's CPU unless the caller states an engine speed: a single CPU
//! core decodes at about 1 GB/s, so on a PCIe link of 24 GB/s the measured B says compression
//! never pays, which is the truth for a CPU decoder. With a GPU decoder or a hardware engine
//! (PlaneZip assumes 64 GB/s), pass its speed: it applies to the codecs with a GPU decoder,
//! the others keep their measured CPU speed. Small tensors are timed three times and the
//! fastest run counts.

use crate::codecs::{elem_for, CodecId, CodecSpec};
use crate::engine::{decode_on, encode_on, Engine};
use crate::source::TensorSpan;
use crate::{Error, Result};
use planepack_core::{transfer, ElemType};
use std::time::Instant;

/// IBP with clusters is tried only where one mask's payload is at most this factor above the
/// smallest payload of the codecs tried before it.
pub const CLUSTER_MARGIN: f64 = 1.1;

/// How the writer picks a codec.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Policy {
    /// The same codec for every tensor.
    Fixed(CodecSpec),
    /// Per tensor, the smallest payload.
    BestRatio,
    /// Per tensor, the fastest transfer over a link of `gbps` GB/s (10^9 bytes/s). The codec
    /// throughput B is `engine_gbps` when given (a GPU decoder, PlaneZip's 64 GB/s engine),
    /// else each codec's decode speed measured here on the tensor.
    Link { gbps: f64, engine_gbps: Option<f64> },
}

/// One candidate's outcome.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Candidate {
    pub codec: CodecSpec,
    pub payload_len: u64,
    /// Measured decode throughput on this tensor, GB/s of raw output.
    pub decode_gbps: f64,
    /// Modelled transfer seconds on the policy's link (0 without a link).
    pub transfer_seconds: f64,
}

/// The chosen codec and its payload.
#[derive(Debug)]
pub struct Choice {
    pub codec: CodecSpec,
    pub elem: ElemType,
    pub payload: Vec<u8>,
    /// Every codec tried (one for a fixed policy).
    pub candidates: Vec<Candidate>,
}

/// Encode `data` (the bytes of `span`) with `codec`, appending to `out`, on `engine` where it
/// has the codec (else the CPU).
pub fn encode(
    engine: Option<&dyn Engine>,
    codec: CodecSpec,
    span: &TensorSpan,
    data: &[u8],
    out: &mut Vec<u8>,
) -> Result<ElemType> {
    let elem = elem_for(&span.dtype, span.dtype_bits);
    encode_on(engine, codec, data, elem, &row_shape(span, elem), out).map_err(
        |source| match source {
            planepack_core::Error::Internal(_) => Error::Internal(format!(
                "tensor {:?}: {}: {source}",
                span.name,
                codec.name()
            )),
            source => Error::Codec {
                tensor: span.name.clone(),
                codec: codec.name(),
                source,
            },
        },
    )?;
    Ok(elem)
}

/// The shape in codec elements: rows are the tensor's last dimension, as bytes over the
/// element width (a 64-bit dtype's row is twice as many 32-bit words).
fn row_shape(span: &TensorSpan, elem: ElemType) -> Vec<usize> {
    let row_bits = span.shape.last().copied().unwrap_or(1) * span.dtype_bits;
    let e = elem.bits() as usize;
    if span.shape.len() < 2 || row_bits == 0 || !row_bits.is_multiple_of(e) {
        return vec![span.len as usize / elem.size()];
    }
    let row = row_bits / e;
    vec![span.len as usize / elem.size() / row, row]
}

/// Decode `payload` into `out` (which has the raw length), on `engine` where it has the codec
/// (else the CPU).
pub fn decode(
    engine: Option<&dyn Engine>,
    codec: CodecSpec,
    payload: &[u8],
    out: &mut [u8],
) -> Result<()> {
    decode_on(engine, codec, payload, out).map_err(|e| match e {
        planepack_core::Error::Internal(_) => Error::Internal(format!("{}: {e}", codec.name())),
        e => Error::Corrupt(format!("{}: {e}", codec.name())),
    })
}

/// Pick a codec for one tensor and return its verified payload. `scratch` is reused for the
/// verifying decodes, which run on the CPU (the reference) whatever encoded the payload.
pub fn choose(
    engine: Option<&dyn Engine>,
    policy: Policy,
    span: &TensorSpan,
    data: &[u8],
    scratch: &mut Vec<u8>,
) -> Result<Choice> {
    let candidates: Vec<CodecSpec> = match policy {
        Policy::Fixed(c) => vec![c],
        _ => CodecSpec::auto_candidates(),
    };
    let m = data.len() as f64;
    let mut best: Option<(f64, Choice)> = None;
    let mut tried = Vec::new();
    let mut payload = Vec::new();
    // Payload of the last IBP variant tried, and whether it beat the one before.
    let mut ibp_last: Option<(usize, bool)> = None;
    for codec in candidates {
        if codec.id == CodecId::IbpClusters && !matches!(policy, Policy::Fixed(_)) {
            let smallest = tried.iter().map(|c: &Candidate| c.payload_len).min();
            let worth = match (ibp_last, smallest) {
                // C = 2: one mask must have come close to the best so far.
                (Some((len, _)), Some(best)) if codec.level <= 2 => {
                    len as f64 <= CLUSTER_MARGIN * best as f64
                }
                // C = 4, 8: only while doubling kept paying.
                (Some((_, improved)), _) => improved,
                _ => false,
            };
            if !worth {
                continue;
            }
        }
        payload.clear();
        let elem = match encode(engine, codec, span, data, &mut payload) {
            Ok(e) => e,
            // In auto mode a codec that cannot take this tensor is just not a candidate (a codec
            // that broke its own rules, `Error::Internal`, is a bug: reported whatever the
            // policy).
            Err(Error::Codec { .. }) if !matches!(policy, Policy::Fixed(_)) => continue,
            Err(e) => return Err(e),
        };
        if matches!(codec.id, CodecId::Ibp | CodecId::IbpClusters) {
            let improved = ibp_last.is_some_and(|(last, _)| payload.len() < last);
            ibp_last = Some((payload.len(), improved));
        }
        // The choice by link speed compares decode times: best of three where a tensor is
        // small enough for one run to be noisy. Otherwise the one verifying decode is timed.
        let runs = match policy {
            Policy::Link { .. } if data.len() < 4 << 20 => 3,
            _ => 1,
        };
        let seconds = verify_and_time(codec, span, data, &payload, runs, scratch)?;
        let decode_gbps = if seconds > 0.0 {
            m / seconds / 1e9
        } else {
            f64::INFINITY
        };
        let ratio = if payload.is_empty() {
            1.0
        } else {
            m / payload.len() as f64
        };
        let transfer_seconds = match policy {
            // Raw goes at the link's speed: no codec in the pipeline.
            Policy::Link { gbps, .. } if codec.id == CodecId::Raw => {
                transfer::transfer_seconds(m, 1.0, gbps, f64::INFINITY)
            }
            // The engine's speed applies to the codecs it decodes (those with a GPU decoder);
            // the others are decoded by this CPU, at the speed just measured.
            Policy::Link { gbps, engine_gbps } => {
                let b = match engine_gbps {
                    Some(e) if codec.gpu_decoder() => e,
                    _ => decode_gbps,
                };
                transfer::transfer_seconds(m, ratio, gbps, b)
            }
            _ => 0.0,
        };
        tried.push(Candidate {
            codec,
            payload_len: payload.len() as u64,
            decode_gbps,
            transfer_seconds,
        });
        let score = match policy {
            Policy::Link { .. } => transfer_seconds,
            _ => payload.len() as f64,
        };
        if best.as_ref().is_none_or(|(s, _)| score < *s) {
            let old = best.take().map(|(_, c)| c.payload).unwrap_or_default();
            best = Some((
                score,
                Choice {
                    codec,
                    elem,
                    payload: std::mem::replace(&mut payload, old),
                    candidates: Vec::new(),
                },
            ));
        }
    }
    let (_, mut choice) = best.ok_or_else(|| Error::Codec {
        tensor: span.name.clone(),
        codec: "auto".into(),
        source: planepack_core::Error::Unsupported("no codec could encode this tensor".into()),
    })?;
    choice.candidates = tried;
    Ok(choice)
}

/// Decode `payload` and compare with `data` (a codec bug must never reach a file); returns
/// the decode time in seconds (the fastest of `runs` decodes).
fn verify_and_time(
    codec: CodecSpec,
    span: &TensorSpan,
    data: &[u8],
    payload: &[u8],
    runs: usize,
    scratch: &mut Vec<u8>,
) -> Result<f64> {
    scratch.clear();
    scratch.resize(data.len(), 0);
    let mut fastest = f64::INFINITY;
    for _ in 0..runs {
        let t = Instant::now();
        decode(None, codec, payload, scratch)?;
        fastest = fastest.min(t.elapsed().as_secs_f64());
    }
    if scratch[..] != data[..] {
        return Err(Error::Codec {
            tensor: span.name.clone(),
            codec: codec.name(),
            source: planepack_core::Error::Unsupported(
                "decoding the fresh payload did not give the input back (codec bug)".into(),
            ),
        });
    }
    Ok(fastest)
}
