use super::*;
use planepack_testkit::{generate, mutate, Mutation, Pattern, Rng};

fn tiers<G: Geometry>() -> Vec<(&'static str, ChunkDecoder)>
where
    G::Plane: raw_tail::RawTail,
{
    chunk_decoders_at_every_tier::<G>()
}

/// Decode `chunk` with every tier; all must agree (same bytes, or the same error).
/// Returns the bytes if they accepted it.
fn agree<G: Geometry>(chunk: &[u8], out_len: usize) -> Option<Vec<u8>>
where
    G::Plane: raw_tail::RawTail,
{
    let mut first: Option<(Result<()>, Vec<u8>)> = None;
    for (name, f) in tiers::<G>() {
        let mut out = vec![0u8; out_len];
        let r = f(chunk, 16, 0, &mut out);
        match &first {
            None => first = Some((r, out)),
            Some((r0, out0)) => {
                let same = match (r0, &r) {
                    (Ok(()), Ok(())) => *out0 == out,
                    (Err(a), Err(b)) => a.to_string() == b.to_string(),
                    _ => false,
                };
                assert!(
                    same,
                    "{name} disagrees with the portable decoder: {r0:?} vs {r:?}"
                );
            }
        }
    }
    match first {
        Some((Ok(()), out)) => Some(out),
        _ => None,
    }
}

fn check_width<G: Geometry>(elem: ElemType, real: &[Vec<u8>])
where
    G::Plane: raw_tail::RawTail,
{
    let codec = BitPlane::new();
    let mut rng = Rng(G::W as u64);
    let mut inputs: Vec<Vec<u8>> = real.to_vec();
    for (i, p) in Pattern::ALL.into_iter().enumerate() {
        // Lengths with a short last chunk and a short last block.
        inputs.push(generate(p, elem, 3 * CHUNK_BYTES + 100 + 37 * i, i as u64));
    }
    let (mut accepted, mut rejected) = (0, 0);
    for raw in &inputs {
        let enc = codec.encode_to_vec(raw, elem).unwrap();
        let header = parse_header(&enc).unwrap();
        let spans = chunk_spans(&enc, &header).unwrap();
        for (i, &(s, e)) in spans.iter().enumerate().take(6) {
            let out_len = (raw.len() - i * CHUNK_BYTES).min(CHUNK_BYTES);
            let start = i * CHUNK_BYTES;
            let decoded = agree::<G>(&enc[s..e], out_len);
            assert_eq!(decoded.as_deref(), Some(&raw[start..start + out_len]));
            let nb = out_len.div_ceil(BLOCK_BYTES);
            let min = 2 + (nb * TABLE_ENTRY_BITS).div_ceil(8);
            for round in 0..150 {
                let m = Mutation::ALL[round % Mutation::ALL.len()];
                let bad = mutate(&enc[s..e], m, &mut rng);
                // Shorter chunks never reach a chunk decoder (`chunk_spans` stops them).
                if bad.len() >= min {
                    if agree::<G>(&bad, out_len).is_some() {
                        accepted += 1;
                    } else {
                        rejected += 1;
                    }
                }
            }
        }
    }
    assert!(
        rejected > 1000 && accepted > 0,
        "{rejected} rejected, {accepted} accepted"
    );
}

fn real(file: &str, dtype: &str) -> Vec<Vec<u8>> {
    let path = planepack_datasets::datasets_dir().join(file);
    match planepack_datasets::load(&path) {
        Ok(tensors) => tensors
            .into_iter()
            .filter(|t| t.dtype == dtype && t.data.len() > 3 * CHUNK_BYTES)
            .take(4)
            .map(|t| t.data)
            .collect(),
        Err(e) => {
            eprintln!("dataset {file} not available ({e}); generated data only");
            Vec::new()
        }
    }
}

/// Every instruction-set tier of the chunk decoder accepts and rejects the same chunks
/// and decodes them to the same bytes: valid chunks of real and generated tensors, and
/// thousands of mutated ones, for each element width.
#[test]
fn chunk_decoder_tiers_agree() {
    let names: Vec<&str> = tiers::<W32>().iter().map(|t| t.0).collect();
    eprintln!("chunk decoder tiers run on this CPU: {}", names.join(", "));
    let act = "activations/efficientnet-lite0";
    check_width::<W32>(
        ElemType::F32,
        &real(&format!("{act}-fp32.safetensors"), "F32"),
    );
    check_width::<W16>(
        ElemType::BF16,
        &real(&format!("{act}-bf16.safetensors"), "BF16"),
    );
    check_width::<W8>(ElemType::U8, &[]);
}

/// Every tier's chunk encoder writes the same bytes (the same source compiled three
/// ways, with each tier's own transposes, sizing and expansion): real and generated
/// tensors, every element width, every chunk.
#[test]
fn chunk_encoder_tiers_agree() {
    let tiers = cpu::tiers();
    let labels: Vec<&str> = tiers.iter().map(|&t| cpu::tier_label(t)).collect();
    eprintln!("chunk encoder tiers run on this CPU: {}", labels.join(", "));
    fn check<G: Geometry>(elem: ElemType, real: &[Vec<u8>], tiers: &[u8]) {
        let mut inputs: Vec<Vec<u8>> = real.to_vec();
        for (i, p) in Pattern::ALL.into_iter().enumerate() {
            inputs.push(generate(p, elem, 2 * CHUNK_BYTES + 100 + 37 * i, i as u64));
        }
        let mut chunks = 0;
        for raw in &inputs {
            for chunk in raw.chunks(CHUNK_BYTES).take(4) {
                let mut want = Vec::new();
                encode_chunk::<G, { cpu::PORTABLE }>(chunk, None, &mut want, &mut Stats::default());
                #[cfg(target_arch = "x86_64")]
                for &t in tiers {
                    let mut got = Vec::new();
                    let stats = &mut Stats::default();
                    match t {
                        // SAFETY: `cpu::tiers()` lists only tiers this CPU runs.
                        cpu::X86_64_V3 => unsafe {
                            simd::encode_chunk_v3_inner::<G>(chunk, None, &mut got, stats)
                        },
                        // SAFETY: as above.
                        cpu::AVX512 => unsafe {
                            simd::encode_chunk_v4_inner::<G>(chunk, None, &mut got, stats)
                        },
                        _ => continue,
                    }
                    assert_eq!(got, want, "tier {} differs", cpu::tier_label(t));
                }
                chunks += 1;
            }
        }
        assert!(chunks > 20, "{chunks} chunks");
    }
    let act = "activations/efficientnet-lite0";
    check::<W32>(
        ElemType::F32,
        &real(&format!("{act}-fp32.safetensors"), "F32"),
        &tiers,
    );
    check::<W16>(
        ElemType::BF16,
        &real(&format!("{act}-bf16.safetensors"), "BF16"),
        &tiers,
    );
    check::<W8>(ElemType::U8, &[], &tiers);
}
