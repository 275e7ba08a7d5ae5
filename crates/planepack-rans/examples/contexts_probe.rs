//! Quick probe: context planes (stream version 4) against none on a tensor file's tensors of
//! at least 1 MiB: bytes with and without, per tensor (with `VERBOSE`) and in all, and encode
//! and decode times. For tuning, not for figures (`cargo xtask bench` makes those).
//!
//! `[DTYPE=BF16] cargo run --release -p planepack-rans --example contexts_probe FILE [LIMIT]`
use planepack_core::{Codec, ElemType};
use planepack_rans::Rans;

fn main() {
    let mut args = std::env::args().skip(1);
    let path = std::path::PathBuf::from(args.next().expect("a tensor file"));
    let limit: usize = args.next().map_or(usize::MAX, |s| s.parse().unwrap());
    let bytes = std::fs::read(&path).unwrap();
    let src = planepack_tensorfile::Source::parse_bytes(&bytes, "x").unwrap();
    let on = Rans::default();
    let off = Rans {
        contexts: false,
        ..Rans::default()
    };
    let (mut raw, mut with, mut without, mut v4) = (0usize, 0usize, 0usize, 0usize);
    let (mut enc_on, mut enc_off, mut dec_on, mut dec_off) = (0.0, 0.0, 0.0, 0.0);
    let dtype = std::env::var("DTYPE").ok();
    let tensors = src
        .tensors
        .iter()
        .filter(|t| t.len >= 1 << 20 && dtype.as_ref().is_none_or(|d| *d == t.dtype));
    for t in tensors.take(limit) {
        let elem = match t.dtype.as_str() {
            "F32" => ElemType::F32,
            "BF16" => ElemType::BF16,
            "F16" => ElemType::F16,
            _ => continue,
        };
        let data = &bytes[t.offset as usize..(t.offset + t.len) as usize];
        let shape = t.shape.clone();
        let code = |r: &Rans, enc_s: &mut f64, dec_s: &mut f64| {
            let mut e = Vec::new();
            let s = std::time::Instant::now();
            r.encode_shaped(data, elem, &shape, &mut e).unwrap();
            *enc_s += s.elapsed().as_secs_f64();
            let mut out = vec![0u8; data.len()];
            let s = std::time::Instant::now();
            r.decode(&e, &mut out).unwrap();
            *dec_s += s.elapsed().as_secs_f64();
            assert!(out == data, "round trip");
            e
        };
        let a = code(&on, &mut enc_on, &mut dec_on);
        let b = code(&off, &mut enc_off, &mut dec_off);
        raw += data.len();
        with += a.len();
        without += b.len();
        v4 += usize::from(a[4] == 4);
        if std::env::var_os("VERBOSE").is_some() {
            println!(
                "{:50} {elem} {:8.2} MB v{} (v{} without) {:+.2} %",
                t.name,
                data.len() as f64 / 1e6,
                a[4],
                b[4],
                100.0 * (b.len() as f64 / a.len() as f64 - 1.0)
            );
        }
    }
    let gbs = |s: f64| raw as f64 / s / 1e9;
    println!(
        "{}: {:.1} MB, ratio {:.4} with contexts ({v4} version-4 streams), {:.4} without \
         ({:+.2} %); encode {:.3} / {:.3} GB/s, decode {:.3} / {:.3} GB/s (with / without)",
        path.display(),
        raw as f64 / 1e6,
        raw as f64 / with as f64,
        raw as f64 / without as f64,
        100.0 * (without as f64 / with as f64 - 1.0),
        gbs(enc_on),
        gbs(enc_off),
        gbs(dec_on),
        gbs(dec_off)
    );
}
