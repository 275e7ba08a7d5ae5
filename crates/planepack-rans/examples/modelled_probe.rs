//! Quick probe: the modelled chunk against the planes on a tensor file (sizes, decode speed).
use planepack_core::{Codec, ElemType};
use planepack_rans::Rans;
fn main() {
    let mut args = std::env::args().skip(1);
    let path = std::path::PathBuf::from(args.next().unwrap());
    let limit: usize = args.next().map_or(1000, |s| s.parse().unwrap());
    let frac: f64 = args.next().map_or(1.0, |s| s.parse().unwrap());
    let bytes = std::fs::read(&path).unwrap();
    let src = planepack_tensorfile::Source::parse_bytes(&bytes, "x").unwrap();
    let (mut raw, mut a, mut b) = (0usize, 0usize, 0usize);
    let (mut ta, mut tb) = (0.0f64, 0.0f64);
    let (mut ea, mut eb) = (0.0f64, 0.0f64);
    let on = Rans::default();
    let off = Rans {
        modelled: false,
        ..Rans::default()
    };
    for t in src.tensors.iter().filter(|t| t.len >= 1 << 20).take(limit) {
        let elem = match t.dtype.as_str() {
            "F32" => ElemType::F32,
            "BF16" => ElemType::BF16,
            "F16" => ElemType::F16,
            _ => continue,
        };
        let row = *t.shape.last().unwrap();
        let n = ((t.len as f64 * frac) as usize) / (row * elem.size()) * row * elem.size();
        let data = &bytes[t.offset as usize..t.offset as usize + n];
        let shape = [n / elem.size() / row, row];
        let mut e1 = Vec::new();
        let s = std::time::Instant::now();
        on.encode_shaped(data, elem, &shape, &mut e1).unwrap();
        ea += s.elapsed().as_secs_f64();
        let mut e2 = Vec::new();
        let s = std::time::Instant::now();
        off.encode_shaped(data, elem, &shape, &mut e2).unwrap();
        eb += s.elapsed().as_secs_f64();
        let mut out = vec![0u8; n];
        off.decode(&e2, &mut out).unwrap();
        let reps: usize = std::env::var("REPS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1);
        let s = std::time::Instant::now();
        for _ in 0..reps {
            on.decode(&e1, &mut out).unwrap();
        }
        ta += s.elapsed().as_secs_f64() / reps as f64;
        assert!(out == data);
        let s = std::time::Instant::now();
        off.decode(&e2, &mut out).unwrap();
        tb += s.elapsed().as_secs_f64();
        raw += n;
        a += e1.len();
        b += e2.len();
    }
    println!(
        "{}: {:.0} MB: modelled {:.3} ({:.2} GB/s encode, {:.2} decode), planes {:.3} ({:.2}, {:.2})",
        path.display(),
        raw as f64 / 1e6,
        raw as f64 / a as f64,
        raw as f64 / ea / 1e9,
        raw as f64 / ta / 1e9,
        raw as f64 / b as f64,
        raw as f64 / eb / 1e9,
        raw as f64 / tb / 1e9
    );
}
