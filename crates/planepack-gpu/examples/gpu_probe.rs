//! Where does GPU decode time go? Times the kernels on synthetic extremes (not for figures).
use planepack_core::{Codec, ElemType};
use planepack_gpu::{Gpu, GpuOptions, ScanPath};

fn main() {
    let g = Gpu::new(&GpuOptions::from_env()).unwrap();
    println!("{}", g.describe());
    let n = 8 << 20;
    let zeros = vec![0u8; n];
    let mut rng = planepack_core::testdata::Rng(1);
    let random: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
    let bp = planepack_bitplane::BitPlane::new();
    for (name, data) in [("zeros", &zeros), ("random", &random)] {
        let enc = bp.encode_to_vec(data, ElemType::F32).unwrap();
        for path in [ScanPath::Subgroup, ScanPath::Workgroup] {
            let p = g.prepare_bitplane(&enc, path).unwrap();
            let t = g.time(&p, 3).median();
            let c = g.time(&g.prepare_copy(data).unwrap(), 3).median();
            println!(
                "bitplane {name} {path:?}: {:.3} GB/s, copy {:.3} GB/s",
                n as f64 / t / 1e9,
                n as f64 / c / 1e9
            );
        }
        let ibp = planepack_ibp::Ibp::default();
        let mut e = Vec::new();
        ibp.encode_shaped(data, ElemType::F32, &[n / 4 / 256, 256], &mut e)
            .unwrap();
        for path in [ScanPath::Subgroup, ScanPath::Workgroup] {
            let p = g.prepare_ibp(&e, None, path).unwrap();
            let t = g.time(&p, 3).median();
            println!("ibp {name} {path:?}: {:.3} GB/s", n as f64 / t / 1e9);
        }
    }
}
