//! The `planepack` binary end to end: folders of real files through every codec, and every
//! kind of bad input with its exit code, its message and no output file left behind.

use planepack_datasets::datasets_dir;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn planepack(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_planepack"))
        .args(args)
        .output()
        .expect("run planepack")
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            v.extend(files(&p));
        } else {
            v.push(p);
        }
    }
    v.sort();
    v
}

/// The error code, stderr, and that nothing but `keep` is in `dir`.
fn fails(out: &Output, code: i32, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "stderr: {err}");
    assert!(err.contains(needle), "expected {needle:?} in: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn every_dataset_file_round_trips_through_every_codec() {
    let data = datasets_dir();
    // Every codec `bench` measures can be written: ours, the baselines, C-Blosc2 at a level.
    for codec in [
        "auto",
        "rans",
        "bitplane",
        "ibp",
        "zstd",
        "zstd --level 1",
        "lz4",
        "zvc",
        "raw",
        "blosc2-shuffle-zstd-9",
        "blosc2-bitshuffle-lz4",
    ] {
        let t = tmp();
        let packed = t.path().join("packed");
        let back = t.path().join("back");
        let mut args = vec!["compress", s(&data), "-o", s(&packed), "-q", "--codec"];
        args.extend(codec.split(' '));
        let o = planepack(&args);
        assert!(
            o.status.success(),
            "{codec}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let o = planepack(&["decompress", s(&packed), "-o", s(&back), "-q"]);
        assert!(
            o.status.success(),
            "{codec}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let originals: Vec<PathBuf> = files(&data)
            .into_iter()
            .filter(|p| {
                matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("safetensors" | "npy")
                )
            })
            .collect();
        assert!(originals.len() >= 18);
        for f in &originals {
            let rel = f.strip_prefix(&data).unwrap();
            let got = std::fs::read(back.join(rel)).unwrap();
            assert!(
                got == std::fs::read(f).unwrap(),
                "{codec}: {} differs",
                rel.display()
            );
        }
        // No temporary files left beside the outputs.
        assert!(files(&packed)
            .iter()
            .all(|p| p.extension().unwrap() == "ppk"));
    }
}

#[test]
fn auto_with_a_link_and_inspect_json() {
    let data = datasets_dir().join("activations/efficientnet-lite0-bf16.safetensors");
    let t = tmp();
    let out = t.path().join("e.ppk");
    let o = planepack(&[
        "compress",
        s(&data),
        "-o",
        s(&out),
        "--link",
        "24",
        "--engine",
        "64",
        "--json",
    ]);
    assert!(o.status.success());
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(report[0]["ratio"].as_f64().unwrap() > 1.2);
    let o = planepack(&["inspect", s(&out), "--json", "--verify"]);
    assert!(o.status.success());
    let inspect: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(inspect["kind"], "container");
    assert_eq!(inspect["tensors"].as_array().unwrap().len(), 341);
    let o = planepack(&["inspect", s(&data), "--json"]);
    assert!(o.status.success());
    let plain: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(plain["kind"], "safetensors");
    // Each tensor lists what every codec would give.
    // (raw, rans, bitplane, ibp, zstd, lz4, zvc: auto's candidates)
    assert_eq!(
        plain["tensors"][0]["candidates"].as_array().unwrap().len(),
        7
    );
}

#[test]
fn unknown_codecs_and_levels_are_usage_errors() {
    let data = datasets_dir().join("kv/smollm2-135m-kv-fp16.safetensors");
    let t = tmp();
    let out = t.path().join("x.ppk");
    for (args, needle) in [
        (
            vec!["--codec", "zst"],
            "codecs are: auto, raw, bitplane, ibp, rans, zstd[-1..22]",
        ),
        (
            vec!["--codec", "zstd", "--level", "30"],
            "--level for zstd is 1 to 22",
        ),
        (vec!["--codec", "lz4", "--level", "3"], "lz4 has no levels"),
        (vec!["--level", "3"], "--level needs --codec"),
    ] {
        let mut a = vec!["compress", s(&data), "-o", s(&out)];
        a.extend(args);
        let o = planepack(&a);
        fails(&o, 2, needle);
        assert!(!out.exists());
    }
}

#[test]
fn bench_on_a_user_file() {
    let data = datasets_dir().join("kv/smollm2-135m-kv-fp16.safetensors");
    let o = planepack(&[
        "bench",
        s(&data),
        "--quick",
        "--codecs",
        "bitplane,lz4",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let recs: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(recs["schema_version"], 2);
    let recs = recs["records"].as_array().unwrap();
    let names: Vec<&str> = recs.iter().map(|r| r["codec"].as_str().unwrap()).collect();
    assert_eq!(names, ["bitplane", "lz4"]);
    assert!(recs.iter().all(|r| r["ratio"].as_f64().unwrap() > 0.9));
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn bad_inputs_give_clear_errors_and_no_output() {
    let t = tmp();
    let d = t.path();
    let good = std::fs::read(datasets_dir().join("kv/smollm2-135m-kv-fp16.safetensors")).unwrap();
    let header = |json: &str| {
        let mut f = (json.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(json.as_bytes());
        f.extend_from_slice(&[0u8; 16]);
        f
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "text.safetensors",
            b"not a tensor file, just text".to_vec(),
            "not a safetensors",
        ),
        ("short.safetensors", good[..100].to_vec(), "truncated"),
        (
            "offsets.safetensors",
            header(r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,32]}}"#),
            "safetensors",
        ),
        (
            "dtype.safetensors",
            header(r#"{"a":{"dtype":"F64","shape":[4],"data_offsets":[0,16]}}"#),
            "safetensors",
        ),
        (
            "q4.safetensors",
            header(r#"{"a":{"dtype":"Q4","shape":[4],"data_offsets":[0,16]}}"#),
            "unsupported dtype",
        ),
    ];
    for (name, bytes, needle) in cases {
        let input = write(d, name, &bytes);
        let out = d.join(format!("{name}.ppk"));
        let o = planepack(&["compress", s(&input), "-o", s(&out), "-q"]);
        fails(&o, 3, needle);
        assert!(o.status.code() == Some(3) && String::from_utf8_lossy(&o.stderr).contains(name));
        assert!(!out.exists(), "{name}: output left behind");
    }
    assert!(files(d).iter().all(|p| !p
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .starts_with(".planepack-")));

    // A good container, then damaged copies of it.
    let input = write(d, "good.safetensors", &good);
    let packed = d.join("good.ppk");
    assert!(planepack(&["compress", s(&input), "-o", s(&packed), "-q"])
        .status
        .success());
    let container = std::fs::read(&packed).unwrap();
    let truncated = write(d, "trunc.ppk", &container[..container.len() - 10]);
    let o = planepack(&["decompress", s(&truncated), "-o", s(&d.join("trunc.out"))]);
    fails(&o, 4, "trunc.ppk");
    assert!(!d.join("trunc.out").exists());
    let mut flipped = container.clone();
    let at = container.len() - 100;
    flipped[at] ^= 4;
    let flipped = write(d, "flip.ppk", &flipped);
    let o = planepack(&["decompress", s(&flipped), "-o", s(&d.join("flip.out"))]);
    fails(&o, 4, "fail their checksum");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("tensor \""),
        "names the tensor"
    );
    assert!(!d.join("flip.out").exists());
    let o = planepack(&["decompress", s(&input), "-o", s(&d.join("x.out"))]);
    fails(&o, 4, "not a planepack container");

    // Outputs: existing without --force, unwritable path.
    let o = planepack(&["compress", s(&input), "-o", s(&packed)]);
    fails(&o, 6, "--force");
    assert_eq!(
        std::fs::read(&packed).unwrap(),
        container,
        "existing output untouched"
    );
    assert!(
        planepack(&["compress", s(&input), "-o", s(&packed), "--force", "-q"])
            .status
            .success()
    );
    let o = planepack(&["compress", s(&input), "-o", s(&d.join("missing/dir/x.ppk"))]);
    fails(&o, 5, "does not exist");
    let o = planepack(&["compress", s(&d.join("nope.safetensors"))]);
    fails(&o, 5, "no such file");
    let o = planepack(&["compress", s(&input), "--codec", "raw", "--link", "24"]);
    fails(&o, 2, "--link");
}
