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
        "ibp-clusters-4",
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
    // (raw, bitplane, ibp, rans, zstd, lz4, zvc, then IBP with clusters where one mask came
    // close to the best: auto's candidates)
    let tried: Vec<&str> = plain["tensors"][0]["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["codec"].as_str().unwrap())
        .collect();
    assert_eq!(
        tried[..7],
        ["raw", "bitplane", "ibp", "rans", "zstd-3", "lz4", "zvc"],
        "{tried:?}"
    );
    assert!(tried[7..].iter().all(|c| c.starts_with("ibp-clusters-")));
}

#[test]
fn unknown_codecs_and_levels_are_usage_errors() {
    let data = datasets_dir().join("kv/smollm2-135m-kv-fp16.safetensors");
    let t = tmp();
    let out = t.path().join("x.ppk");
    for (args, needle) in [
        (
            vec!["--codec", "zst"],
            "codecs are: auto, raw, bitplane, ibp, ibp-clusters[-2..16], rans[-0..1], zstd[-1..22]",
        ),
        (
            vec!["--codec", "zstd", "--level", "30"],
            "--level for zstd is 1 to 22",
        ),
        (
            vec!["--codec", "rans", "--level", "2"],
            "--level for rans is 0 to 1",
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

/// Issue 17: symbolic links inside a folder are not followed, so two link loops neither
/// recurse (41 nested copies before) nor hang; a FIFO named like a tensor file is refused,
/// not opened (which blocks forever).
#[cfg(unix)]
#[test]
fn link_loops_and_fifos_do_not_hang() {
    let d = tmp();
    let input = d.path().join("in");
    std::fs::create_dir(&input).unwrap();
    std::fs::copy(
        datasets_dir().join("weights/efficientnet-lite0-weights-bf16.safetensors"),
        input.join("w.safetensors"),
    )
    .unwrap();
    std::os::unix::fs::symlink(".", input.join("loop")).unwrap();
    std::os::unix::fs::symlink("..", input.join("up")).unwrap();
    let out = d.path().join("out");
    let done = planepack(&["compress", s(&input), "-o", s(&out), "-q"]);
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert_eq!(files(&out), vec![out.join("w.safetensors.ppk")]);
    let bench = planepack(&["bench", s(&input), "--codecs", "raw", "--quick"]);
    assert!(bench.status.success());
    assert_eq!(
        String::from_utf8_lossy(&bench.stdout)
            .lines()
            .filter(|l| l.starts_with("w "))
            .count(),
        1,
        "one file measured once"
    );
    let fifo = d.path().join("pipe.safetensors");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    fails(
        &planepack(&["compress", s(&fifo), "-o", s(&d.path().join("p.ppk"))]),
        3,
        "not a regular file",
    );
    fails(&planepack(&["bench", s(&fifo)]), 3, "not a regular file");
    fails(&planepack(&["inspect", s(&fifo)]), 3, "not a regular file");
}

/// Issue 17: `--force` never replaces the input itself, nor an output that is not a regular
/// file (a symbolic link, a device); outputs get their input's permission bits.
#[cfg(unix)]
#[test]
fn force_spares_the_input_and_special_files_and_outputs_keep_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let d = tmp();
    let input = d.path().join("w.safetensors");
    std::fs::copy(
        datasets_dir().join("weights/efficientnet-lite0-weights-bf16.safetensors"),
        &input,
    )
    .unwrap();
    let before = std::fs::read(&input).unwrap();
    let out = planepack(&["compress", s(&input), "-o", s(&input), "--force", "-q"]);
    fails(&out, 2, "the output is the input");
    assert_eq!(std::fs::read(&input).unwrap(), before);
    let link = d.path().join("null.ppk");
    std::os::unix::fs::symlink("/dev/null", &link).unwrap();
    let out = planepack(&["compress", s(&input), "-o", s(&link), "--force", "-q"]);
    fails(&out, 6, "not a regular file");
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    let out = planepack(&["compress", s(&input), "-o", "/dev/null", "--force", "-q"]);
    fails(&out, 6, "not a regular file");
    std::fs::set_permissions(&input, std::fs::Permissions::from_mode(0o640)).unwrap();
    let ppk = d.path().join("w.ppk");
    assert!(planepack(&["compress", s(&input), "-o", s(&ppk), "-q"])
        .status
        .success());
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&ppk), 0o640);
    std::fs::set_permissions(&ppk, std::fs::Permissions::from_mode(0o604)).unwrap();
    let back = d.path().join("back.safetensors");
    assert!(planepack(&["decompress", s(&ppk), "-o", s(&back), "-q"])
        .status
        .success());
    assert_eq!(mode(&back), 0o604);
}

/// Issue 17: Ctrl-C (SIGINT) or SIGTERM during `compress` removes the hidden temporary file
/// and exits with 130. The input is large enough (64 MiB through zstd-19) that the signal
/// lands mid-write; the exit code proves it did.
#[cfg(unix)]
#[test]
fn a_signal_mid_write_leaves_no_temporary_file() {
    let d = tmp();
    let src = planepack_datasets::load(&datasets_dir().join("kv/smollm2-135m-kv-bf16.safetensors"))
        .unwrap();
    let t = &src[0];
    let mut data = Vec::new();
    while data.len() < 64 << 20 {
        data.extend_from_slice(&t.data);
    }
    let n = data.len() / 2;
    let header = format!(
        r#"{{"x":{{"dtype":"BF16","shape":[{n}],"data_offsets":[0,{}]}}}}"#,
        2 * n
    );
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.extend_from_slice(&data[..2 * n]);
    let input = write(d.path(), "big.safetensors", &file);
    for signal in ["INT", "TERM"] {
        let out = d.path().join(format!("big-{signal}.ppk"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_planepack"))
            .args([
                "compress",
                s(&input),
                "-o",
                s(&out),
                "--codec",
                "zstd-19",
                "-q",
            ])
            .spawn()
            .unwrap();
        // Wait until the temporary file exists, then signal.
        let start = std::time::Instant::now();
        let temp = || {
            std::fs::read_dir(d.path())
                .unwrap()
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with(".planepack-"))
        };
        while !temp() && start.elapsed().as_secs() < 60 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(temp(), "no temporary file appeared");
        let killed = Command::new("kill")
            .args([&format!("-{signal}"), &child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let status = child.wait().unwrap();
        assert_eq!(
            status.code(),
            Some(130),
            "SIG{signal}: interrupted mid-write"
        );
        assert!(!temp(), "SIG{signal}: temporary file left behind");
        assert!(!out.exists());
    }
}

/// Issue 17: a folder with a file whose name is not UTF-8 compresses and decompresses (the
/// output names are built on the OS string).
#[cfg(target_os = "linux")]
#[test]
fn non_utf8_file_names_round_trip() {
    use std::os::unix::ffi::OsStrExt;
    let d = tmp();
    let input = d.path().join("in");
    std::fs::create_dir(&input).unwrap();
    let name = std::ffi::OsStr::from_bytes(b"w\xff.safetensors");
    let bytes =
        std::fs::read(datasets_dir().join("weights/efficientnet-lite0-weights-bf16.safetensors"))
            .unwrap();
    std::fs::write(input.join(name), &bytes).unwrap();
    let packed = d.path().join("packed");
    let back = d.path().join("back");
    let c = planepack(&["compress", s(&input), "-o", s(&packed), "-q"]);
    assert!(c.status.success(), "{}", String::from_utf8_lossy(&c.stderr));
    let x = planepack(&["decompress", s(&packed), "-o", s(&back), "-q"]);
    assert!(x.status.success(), "{}", String::from_utf8_lossy(&x.stderr));
    assert_eq!(std::fs::read(back.join(name)).unwrap(), bytes);
}

/// Issue 17 (item 10): `inspect` takes a folder as the other commands do: every container and
/// tensor file under it, one report each (a JSON array), links not followed.
#[test]
fn inspect_takes_a_folder() {
    let d = tmp();
    let input = d.path().join("in");
    std::fs::create_dir_all(input.join("sub")).unwrap();
    for (name, data) in [
        ("a.safetensors", "kv/smollm2-135m-kv-fp16.safetensors"),
        (
            "sub/b.safetensors",
            "weights/efficientnet-lite0-weights-bf16.safetensors",
        ),
    ] {
        std::fs::copy(datasets_dir().join(data), input.join(name)).unwrap();
    }
    std::fs::write(input.join("notes.txt"), "not a tensor file").unwrap();
    let out = d.path().join("out");
    let o = planepack(&[
        "compress",
        s(&input),
        "-o",
        s(&out),
        "-q",
        "--codec",
        "zstd",
    ]);
    assert!(o.status.success());
    let o = planepack(&["inspect", s(&out), "--json", "--verify"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let reports: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let reports = reports.as_array().unwrap();
    assert_eq!(reports.len(), 2);
    assert!(reports
        .iter()
        .all(|r| r["kind"] == "container" && r["verified"] == true));
    let o = planepack(&["inspect", s(&input)]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(text.matches("(safetensors,").count(), 2, "{text}");
    let empty = d.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    fails(
        &planepack(&["inspect", s(&empty)]),
        3,
        "no .ppk, .safetensors or .npy files",
    );
}

/// `--device gpu`: bit-plane and IBP encoded on the GPU give the very containers the CPU
/// writes; rANS (and `auto`, which takes it) encoded on the GPU decode on the CPU to the
/// original files; bit-plane, IBP and rANS containers decode on the GPU to the original files. Skips without
/// a GPU adapter, except in CI (lavapipe there).
#[test]
fn the_gpu_device_writes_and_reads_the_cpu_bytes() {
    let data = datasets_dir();
    let t = tmp();
    for codec in ["ibp", "bitplane"] {
        let (cpu, gpu) = (
            t.path().join(format!("cpu-{codec}")),
            t.path().join(format!("gpu-{codec}")),
        );
        let o = planepack(&[
            "compress",
            s(&data),
            "-o",
            s(&gpu),
            "-q",
            "--codec",
            codec,
            "--device",
            "gpu",
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        if !o.status.success() && err.contains("no GPU adapter") && std::env::var_os("CI").is_none()
        {
            eprintln!("skipping: {err}");
            return;
        }
        assert!(o.status.success(), "{err}");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains("parts encoded on the GPU, 0 on the CPU"),
            "{out}"
        );
        let o = planepack(&["compress", s(&data), "-o", s(&cpu), "-q", "--codec", codec]);
        assert!(o.status.success());
        let (a, b) = (files(&cpu), files(&gpu));
        assert_eq!(a.len(), b.len());
        assert!(a.len() >= 18);
        for (x, y) in a.iter().zip(&b) {
            assert!(
                std::fs::read(x).unwrap() == std::fs::read(y).unwrap(),
                "{codec}: {}",
                y.display()
            );
        }
    }
    // rANS on the GPU writes byte planes only (GPU_RANS; the GPU crate tests it byte for byte
    // against the CPU encoder at those settings): every part on the GPU, and the containers
    // decode on the CPU to the original files.
    for codec in ["rans", "auto"] {
        let packed = t.path().join(format!("gpu-{codec}"));
        let back = t.path().join(format!("gpu-{codec}-back"));
        let o = planepack(&[
            "compress",
            s(&data),
            "-o",
            s(&packed),
            "-q",
            "--codec",
            codec,
            "--device",
            "gpu",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let out = String::from_utf8_lossy(&o.stdout);
        if codec == "rans" {
            assert!(
                out.contains("parts encoded on the GPU, 0 on the CPU"),
                "{out}"
            );
        }
        let o = planepack(&["decompress", s(&packed), "-o", s(&back), "-q"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(same_files(&back, &data, &format!("{codec} --device gpu")) >= 18);
    }
    for codec in ["bitplane", "ibp", "ibp-clusters-4", "rans"] {
        let packed = t.path().join(format!("p-{codec}"));
        let back = t.path().join(format!("b-{codec}"));
        let o = planepack(&[
            "compress",
            s(&data),
            "-o",
            s(&packed),
            "-q",
            "--codec",
            codec,
        ]);
        assert!(o.status.success());
        let o = planepack(&[
            "decompress",
            s(&packed),
            "-o",
            s(&back),
            "-q",
            "--device",
            "gpu",
        ]);
        assert!(
            o.status.success(),
            "{codec}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains("parts decoded on the GPU"), "{out}");
        same_files(&back, &data, codec);
    }
}

/// Every file under `restored` equals the file at the same place under `original`; returns
/// how many there are.
fn same_files(restored: &Path, original: &Path, what: &str) -> usize {
    let all = files(restored);
    for f in &all {
        let rel = f.strip_prefix(restored).unwrap();
        assert!(
            std::fs::read(f).unwrap() == std::fs::read(original.join(rel)).unwrap(),
            "{what}: {}",
            rel.display()
        );
    }
    all.len()
}
