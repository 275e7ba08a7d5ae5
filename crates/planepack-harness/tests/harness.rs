//! The harness on tiny inputs: records, verification, tables and plots. The inputs here are
//! synthetic; they test the machinery, they are not results.

use planepack_core::{Codec, ElemType, Result as CResult};
use planepack_harness::plots::pareto;
use planepack_harness::{measure, plots, report, Group, Results, Settings};
use planepack_testkit::{generate, Pattern};

fn tiny_group(category: &str) -> Group {
    Group {
        dataset: format!("tiny-{category}"),
        category: category.into(),
        elem: ElemType::BF16,
        dtype: "bf16".into(),
        size_class: planepack_harness::SizeClass::Small,
        tensors: vec![
            (
                vec![64, 64],
                generate(Pattern::ReluSparse, ElemType::BF16, 8192, 1),
            ),
            (vec![100], generate(Pattern::Smooth, ElemType::BF16, 200, 2)),
        ],
    }
}

/// A codec that corrupts one byte on decode: the harness must refuse its figures.
struct Liar;
impl Codec for Liar {
    fn name(&self) -> String {
        "liar".into()
    }
    fn max_compressed_len(&self, n: usize, _: ElemType) -> usize {
        n
    }
    fn encode(&self, input: &[u8], _: ElemType, out: &mut Vec<u8>) -> CResult<()> {
        out.extend_from_slice(input);
        Ok(())
    }
    fn decoded_len(&self, c: &[u8]) -> CResult<usize> {
        Ok(c.len())
    }
    fn decode(&self, c: &[u8], out: &mut [u8]) -> CResult<()> {
        out.copy_from_slice(c);
        if let Some(b) = out.first_mut() {
            *b ^= 1;
        }
        Ok(())
    }
}

#[test]
fn codecs_are_chosen_by_exact_name() {
    let names = |v: &[&str]| {
        planepack_harness::registry::named(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .map(|cs| cs.iter().map(|c| c.name()).collect::<Vec<_>>())
    };
    // `lz4` once meant every codec whose name contains it (four of them).
    assert_eq!(names(&["bitplane", "lz4"]).unwrap(), ["bitplane", "lz4"]);
    assert_eq!(names(&["zstd"]).unwrap(), ["zstd-3"]);
    assert!(names(&["zst"]).is_err());
}

#[test]
fn a_codec_that_does_not_round_trip_fails_the_run() {
    let err = measure::measure_group(&Liar, &tiny_group("activations"), Settings::quick(), "cpu")
        .unwrap_err();
    assert!(err.to_string().contains("does not round-trip"), "{err}");
}

#[test]
fn records_tables_and_plots_from_tiny_inputs() {
    let mut records = Vec::new();
    for cat in ["activations", "kv-cache"] {
        let g = tiny_group(cat);
        let names = ["bitplane", "ibp", "raw", "lz4", "blosc2-shuffle-zstd-5"].map(String::from);
        for c in planepack_harness::registry::named(&names).unwrap() {
            let mut r = measure::measure_spec(c, &g, Settings::quick(), "cpu: test").unwrap();
            measure::annotate(&mut r, &g).unwrap();
            assert_eq!(r.raw_bytes, 8192 + 200);
            assert!(r.ratio > 0.0 && r.decode_gbps > 0.0 && r.memcpy_gbps > 0.0);
            assert!(
                r.decode_gbps_spread[0] <= r.decode_gbps
                    && r.decode_gbps <= r.decode_gbps_spread[1]
            );
            records.push(r);
        }
    }
    let bp = records.iter().find(|r| r.codec == "bitplane").unwrap();
    assert!(bp.notes.contains_key("paper_layout_ratio"));
    let raw = records.iter().find(|r| r.codec == "raw").unwrap();
    assert_eq!(raw.ratio, 1.0);

    let blosc = records
        .iter()
        .find(|r| r.codec == "blosc2-shuffle-zstd-5")
        .unwrap();
    assert!(
        blosc.implementation.starts_with("C-Blosc2 2."),
        "{}",
        blosc.implementation
    );
    assert!(!blosc.gpu_decoder && bp.gpu_decoder);
    assert!(!bp.cpu.is_empty() && !bp.simd_tier.is_empty() && bp.threads >= 1);

    // A device name with a comma and a quote (lavapipe's has a comma) stays one field.
    records[0].gpu_device = Some("llvmpipe (LLVM 15.0.6, 256 bits) \"x\"".into());
    let res = Results {
        schema_version: planepack_harness::SCHEMA_VERSION,
        machine: "test".into(),
        command: "test".into(),
        quick: true,
        code_version: "x".into(),
        records,
    };
    let csv = report::csv(&res);
    assert_eq!(csv.lines().count(), 1 + res.records.len());
    // Fields per line, commas inside quotes not counted (RFC 4180).
    let fields = |line: &str| {
        let mut quoted = false;
        1 + line
            .chars()
            .filter(|&c| {
                quoted ^= c == '"';
                c == ',' && !quoted
            })
            .count()
    };
    let header = fields(csv.lines().next().unwrap());
    assert!(csv.lines().all(|l| fields(l) == header), "{csv}");
    let md = report::summary(&res);
    for needle in [
        "## activations",
        "## kv-cache",
        "PlaneZip, BF16 activations",
        "Best codec per dataset",
        "paper layout",
    ] {
        assert!(md.contains(needle), "summary lacks {needle:?}");
    }
    let dir = std::env::temp_dir().join(format!("planepack-harness-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let files = plots::all(&res.records, &dir).unwrap();
    assert_eq!(files.len(), 2 + 1 + 2);
    for f in files {
        let svg = std::fs::read_to_string(&f).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("bitplane"),
            "{}",
            f.display()
        );
    }
    // Round trip through JSON, as `cargo xtask tables` does.
    let back: Results = serde_json::from_str(&serde_json::to_string(&res).unwrap()).unwrap();
    assert_eq!(back, res);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn pareto_front_keeps_only_undominated_points() {
    let pts = [
        (1.0, 2.0),
        (2.0, 1.5),
        (0.5, 1.0),
        (2.0, 1.0),
        (3.0, 1.2),
        (1.0, 1.9),
    ];
    assert_eq!(pareto(&pts), vec![(1.0, 2.0), (2.0, 1.5), (3.0, 1.2)]);
}

#[test]
fn geomean_of_known_values() {
    assert!((report::geomean(&[1.0, 4.0]) - 2.0).abs() < 1e-12);
    assert_eq!(report::geomean(&[]), 0.0);
}

/// The decode clock must stop before the reference memcpy starts: with one closure that takes
/// 5 ms and one that takes 40 ms, the first must not be reported near 45 ms.
#[test]
fn interleaved_timing_keeps_each_closure_on_its_own_clock() {
    let sleep = |ms| move || std::thread::sleep(std::time::Duration::from_millis(ms));
    let (a, b) = measure::time_interleaved(Settings::quick(), sleep(5), sleep(40));
    assert_eq!(a.len(), b.len());
    let med = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    assert!(
        med(&a) < 0.030,
        "5 ms closure timed at {:.1} ms",
        med(&a) * 1e3
    );
    assert!(
        med(&b) >= 0.040,
        "40 ms closure timed at {:.1} ms",
        med(&b) * 1e3
    );
}

/// Raw's decode is a memcpy of the same bytes, so the harness must report it at memcpy speed.
/// When the decode clock also covered the memcpy (the bug this pins), raw came out at 0.5.
#[test]
fn raw_decode_is_reported_at_memcpy_speed() {
    let data: Vec<u8> = (0..16usize << 20).map(|i| (i * 31 % 251) as u8).collect();
    let g = Group {
        dataset: "raw-timing".into(),
        category: "activations".into(),
        elem: ElemType::U8,
        dtype: "u8".into(),
        size_class: planepack_harness::SizeClass::Large,
        tensors: vec![(vec![data.len()], data)],
    };
    let settings = Settings {
        min_runs: 9,
        min_seconds: 0.2,
        max_runs: 30,
    };
    let rec = measure::measure_group(&planepack_baselines::Raw, &g, settings, "cpu").unwrap();
    let rel = rec.decode_gbps / rec.memcpy_gbps;
    assert!(
        (0.75..1.4).contains(&rel),
        "raw decode {:.2} GB/s against memcpy {:.2} GB/s ({rel:.2}): the decode timing \
         includes something other than decode",
        rec.decode_gbps,
        rec.memcpy_gbps
    );
}

/// A file measured in small batches gives the same bytes, tensors and ratio as measured whole,
/// and batches never mix dtypes or exceed the cap unless one tensor does.
#[test]
fn batched_measurement_adds_up_to_the_whole() {
    use planepack_harness::input::{groups_of, Batches};
    let path = planepack_datasets::datasets_dir()
        .join("weights/efficientnet-lite0-weights-bf16.safetensors");
    let whole = groups_of("w", "weights", &path).unwrap();
    let cap = 64 << 10;
    let mut batches = Batches::open("w", "weights", &path, cap).unwrap();
    assert!(batches.len() > whole.len(), "a 64 KiB cap splits the file");
    let codec = planepack_harness::registry::named(&["bitplane".to_string()]).unwrap()[0].codec();
    let s = Settings::quick();
    let mut merged: Vec<planepack_harness::Record> = Vec::new();
    for i in 0..batches.len() {
        let g = batches.load(i).unwrap();
        assert!(g.raw_bytes() <= cap || g.tensors.len() == 1);
        let r = measure::measure_group(codec.as_ref(), &g, s, "cpu").unwrap();
        match merged.iter_mut().find(|m| m.dtype == r.dtype) {
            Some(m) => m.merge(&r).unwrap(),
            None => merged.push(r),
        }
    }
    assert_eq!(merged.len(), whole.len());
    for (m, g) in merged.iter().zip(&whole) {
        let w = measure::measure_group(codec.as_ref(), g, s, "cpu").unwrap();
        assert_eq!(
            (m.dtype.as_str(), m.tensors, m.raw_bytes, m.compressed_bytes),
            (w.dtype.as_str(), w.tensors, w.raw_bytes, w.compressed_bytes)
        );
        assert_eq!(m.ratio, w.ratio);
        assert!(m.decode_gbps > 0.0 && m.decode_gbps_spread[0] <= m.decode_gbps_spread[1]);
    }
    // Records of different codecs or dtypes do not merge.
    let g = batches.load(0).unwrap();
    let other = planepack_harness::registry::named(&["raw".to_string()]).unwrap()[0].codec();
    let a = measure::measure_group(codec.as_ref(), &g, s, "cpu").unwrap();
    let mut b = measure::measure_group(other.as_ref(), &g, s, "cpu").unwrap();
    assert!(b.merge(&a).is_err());
    // A note every batch carries alike (a peer's "measured_from") merges; differing ones do not.
    let mut x = a.clone();
    let note = |r: &mut planepack_harness::Record, v: &str| {
        r.notes.insert("measured_from".into(), serde_json::json!(v));
    };
    note(&mut x, "Python");
    let mut y = x.clone();
    assert!(x.merge(&y).is_ok(), "equal notes merge");
    note(&mut y, "elsewhere");
    assert!(x.merge(&y).is_err(), "differing notes do not");
}

/// Merged rates are total bytes over total time: two batches of equal size at 1 and 3 GB/s
/// make 1.5 GB/s, not the mean 2.
#[test]
fn merged_rates_are_bytes_over_summed_time() {
    let g = tiny_group("weights");
    let raw = planepack_harness::registry::named(&["raw".to_string()]).unwrap()[0].codec();
    let mut a = measure::measure_group(raw.as_ref(), &g, Settings::quick(), "cpu").unwrap();
    let mut b = a.clone();
    a.decode_gbps = 1.0;
    b.decode_gbps = 3.0;
    a.merge(&b).unwrap();
    assert!((a.decode_gbps - 1.5).abs() < 1e-12);
    assert_eq!(a.raw_bytes, 2 * b.raw_bytes);
}

/// Axis labels of ticks 0.05 apart (a ratio panel's grid) are all different.
#[test]
fn tick_labels_tell_close_ticks_apart() {
    let labels: Vec<String> = (0..8)
        .map(|i| plots::tick(0.95 + 0.05 * i as f64))
        .collect();
    let mut unique = labels.clone();
    unique.dedup();
    assert_eq!(labels, unique, "{labels:?}");
    assert_eq!(plots::tick(1.0), "1");
    assert_eq!(plots::tick(1.05), "1.05");
    assert_eq!(plots::tick(20.0), "20");
}

/// A codec that did not take every tensor of a category (OpenZL's float-entropy graph takes
/// 16-bit floats only) gets no category geomean and no place in the rankings: a geomean over
/// its part of the category would be compared with others' over all of it.
#[test]
fn a_codec_measured_on_part_of_a_category_is_not_ranked_there() {
    let g = tiny_group("activations");
    let raw = planepack_harness::registry::named(&["raw".to_string()]).unwrap();
    let base = measure::measure_group(raw[0].codec().as_ref(), &g, Settings::quick(), "cpu: test")
        .unwrap();
    let rec = |dataset: &str, codec: &str, ratio: f64| {
        let mut r = base.clone();
        r.dataset = dataset.into();
        r.codec = codec.into();
        r.ratio = ratio;
        r
    };
    let records = vec![
        rec("a", "whole", 2.0),
        rec("b", "whole", 1.0),
        rec("a", "part", 4.0),
    ];
    let whole = report::category_geomean(&records, "activations", None, "whole").unwrap();
    assert!((whole - 2f64.sqrt()).abs() < 1e-12);
    assert_eq!(
        report::category_geomean(&records, "activations", None, "part"),
        None
    );
    let table = report::ratio_speed_table(&records);
    assert!(
        table.contains(&format!("| part | {} |", report::PARTIAL)),
        "{table}"
    );
    assert!(table.contains(report::PARTIAL_NOTE));
    let best = report::best_per_category(&records);
    assert!(
        best.contains("whole 1.414x") && !best.contains("part 4"),
        "{best}"
    );
    // Nor a point or a line in the category's plots (it once stood above every codec in the
    // ratio-vs-decode plot of activations).
    let dir = std::env::temp_dir().join(format!("planepack-part-plots-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (points, lines) = (dir.join("points.svg"), dir.join("lines.svg"));
    planepack_harness::plots::ratio_vs_decode(&records, "activations", &points).unwrap();
    planepack_harness::plots::effective_bandwidth(&records, "activations", &lines).unwrap();
    for svg in [&points, &lines] {
        let text = std::fs::read_to_string(svg).unwrap();
        assert!(text.contains("\nwhole\n"), "{}", svg.display());
        assert!(!text.contains("\npart\n"), "{}", svg.display());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The peer table says `rans` is ahead only where it is at least as fast both ways at a
/// ratio at least as high, and names each thing it is behind on otherwise, with its legend.
#[test]
fn peer_comparison_names_what_rans_is_behind_on() {
    let g = tiny_group("activations");
    let raw = planepack_harness::registry::named(&["raw".to_owned()]).unwrap();
    let base = measure::measure_spec(raw[0], &g, Settings::quick(), "cpu: test").unwrap();
    let with = |codec: &str, ratio: f64, enc: f64, dec: f64| {
        let mut r = base.clone();
        r.codec = codec.into();
        r.ratio = ratio;
        r.encode_gbps = enc;
        r.decode_gbps = dec;
        r
    };
    let records = vec![
        with("rans", 1.5, 0.3, 1.0),
        with("zipnn", 1.4, 0.5, 0.9),
        with("openzl-best", 1.6, 0.1, 0.5),
        with("blosc2-shuffle-zstd-5", 1.3, 0.1, 0.8),
        with("lz4", 1.0, 5.0, 9.0),
    ];
    let t = report::peer_comparison(&records);
    let row = |peer: &str| {
        t.lines()
            .find(|l| l.starts_with(&format!("| activations | {peer} |")))
            .unwrap_or_else(|| panic!("no row for {peer} in\n{t}"))
            .to_owned()
    };
    assert!(
        row("zipnn").ends_with("| no | encode |"),
        "{}",
        row("zipnn")
    );
    assert!(row("openzl-best").ends_with("| no | ratio |"));
    assert!(row("blosc2-shuffle-zstd-5").ends_with("| yes | - |"));
    assert!(!t.contains("| lz4 |"), "lz4 is not one of the peers");
    assert!(t.contains("- **encode**") && t.contains("- **ratio**") && !t.contains("- **decode**"));
}
