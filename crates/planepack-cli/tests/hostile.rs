//! The command against hostile and odd inputs: each a defect found by attacking it, each with
//! the exit code, message and clean output folder it must give now.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn planepack(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_planepack"))
        .args(args)
        .output()
        .expect("run planepack")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The exit code, a phrase of stderr, no panic message, and nothing in `dir` but `keep`.
fn fails(out: &Output, code: i32, needle: &str, dir: &Path, keep: &[&Path]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "stderr: {err}");
    assert!(err.contains(needle), "expected {needle:?} in: {err}");
    assert!(!err.contains("panicked"), "{err}");
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        assert!(keep.contains(&p.as_path()), "left behind: {}", p.display());
    }
}

fn hostile(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../planepack-container/tests/hostile")
        .join(name)
}

/// A safetensors file of one F32 tensor of `shape` (all zeros).
fn safetensors(shape: &[usize]) -> Vec<u8> {
    let n: usize = shape.iter().product();
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let json = format!(
        r#"{{"t":{{"dtype":"F32","shape":[{}],"data_offsets":[0,{}]}}}}"#,
        dims.join(","),
        4 * n
    );
    let mut f = (json.len() as u64).to_le_bytes().to_vec();
    f.extend_from_slice(json.as_bytes());
    f.resize(f.len() + 4 * n, 0);
    f
}

/// Is a GPU adapter there? In CI one must be (lavapipe); elsewhere the GPU cases are skipped
/// with a message.
fn gpu_or_skip(o: &Output) -> bool {
    let err = String::from_utf8_lossy(&o.stderr);
    if err.contains("no GPU adapter") {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI needs a GPU adapter: {err}"
        );
        eprintln!("skipping the GPU case: {err}");
        return false;
    }
    true
}

/// A 221-byte container whose IBP stream claims 2^60 columns crashed `decompress` (exit 101,
/// or an abort with a temporary file left behind), `inspect --verify` and `--device gpu`; a
/// rANS stream claiming 256 MiB in a 4 KiB entry made the GPU path allocate it. Now each is a
/// corrupt file (exit 4) naming the tensor, and the folder is clean.
#[test]
fn hostile_containers_are_corrupt_files_on_every_path() {
    for name in [
        "ibp-columns-2e60-v1.ppk",
        "ibp-columns-2e60-v2.ppk",
        "rans-claims-256mib.ppk",
    ] {
        let d = tempfile::tempdir().unwrap();
        let input = d.path().join(name);
        std::fs::copy(hostile(name), &input).unwrap();
        let out = d.path().join("out.safetensors");
        let o = planepack(&["decompress", s(&input), "-o", s(&out), "-q"]);
        fails(&o, 4, "tensor \"t\"", d.path(), &[&input]);
        let o = planepack(&["inspect", s(&input), "--verify"]);
        fails(&o, 4, "tensor \"t\"", d.path(), &[&input]);
        let o = planepack(&[
            "decompress",
            s(&input),
            "-o",
            s(&out),
            "-q",
            "--device",
            "gpu",
        ]);
        if gpu_or_skip(&o) {
            fails(&o, 4, "tensor \"t\"", d.path(), &[&input]);
            let err = String::from_utf8_lossy(&o.stderr);
            if name.starts_with("rans") {
                // Refused on the length, before any device buffer was made for it.
                assert!(err.contains("output buffer holds 4096 bytes"), "{err}");
            }
        }
    }
}

/// A shape of 22,000 dimensions (its text over 65,535 characters) panicked `inspect`'s table.
/// The table abbreviates it; the JSON keeps it whole; `compress` and `inspect` of the container
/// agree.
#[test]
fn a_tensor_with_a_long_shape_is_inspected() {
    let d = tempfile::tempdir().unwrap();
    let mut shape = vec![1usize; 22_000];
    shape[0] = 4;
    let input = d.path().join("long.safetensors");
    std::fs::write(&input, safetensors(&shape)).unwrap();
    let o = planepack(&["inspect", s(&input)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("[4, 1, 1"), "{table}");
    assert!(table.contains("... 22000 dims]"), "{table}");
    assert!(
        table.lines().all(|l| l.len() < 400),
        "a line is stretched: {table}"
    );
    let ppk = d.path().join("long.ppk");
    assert!(planepack(&["compress", s(&input), "-o", s(&ppk), "-q"])
        .status
        .success());
    for args in [
        vec!["inspect", s(&ppk)],
        vec!["inspect", s(&ppk), "--verify"],
    ] {
        let o = planepack(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(String::from_utf8_lossy(&o.stdout).contains("... 22000 dims]"));
    }
    let o = planepack(&["inspect", s(&ppk), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["tensors"][0]["shape"].as_array().unwrap().len(), 22_000);
}

/// `inspect --verify` over a folder that holds containers and plain tensor files verifies the
/// containers and reports the plain files (it refused them as corrupt, exit 4).
#[test]
fn verify_over_a_mixed_folder_succeeds() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("a.safetensors");
    std::fs::write(&input, safetensors(&[8, 16])).unwrap();
    let ppk = d.path().join("a.safetensors.ppk");
    assert!(planepack(&["compress", s(&input), "-q"]).status.success());
    assert!(ppk.exists());
    let o = planepack(&["inspect", s(d.path()), "--verify"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("verified: all 1 tensors"), "{out}");
    assert!(out.contains("(safetensors,"), "{out}");
}

/// `-o -` wrote a file named `-`; a codec name with a level and `--level` silently took the
/// flag. Both are usage errors now.
#[test]
fn stdout_outputs_and_two_levels_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("a.safetensors");
    std::fs::write(&input, safetensors(&[8, 16])).unwrap();
    let o = planepack(&["compress", s(&input), "-o", "-"]);
    fails(&o, 2, "standard output", d.path(), &[&input]);
    assert!(!Path::new("-").exists());
    let o = planepack(&["compress", s(&input), "--codec", "zstd-19", "--level", "3"]);
    fails(&o, 2, "already names a level", d.path(), &[&input]);
    let o = planepack(&[
        "compress",
        s(&input),
        "--codec",
        "zstd",
        "--level",
        "3",
        "-q",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// An input with mode 044 (its owner may not read it back, others may) failed with "written
/// container does not parse: Permission denied" (exit 1): the output took the input's mode
/// before it was re-read. As a user who can read the input through its group or other bits,
/// `compress` now succeeds and the output has the input's mode. Run as root, the command is run
/// as `nobody` (root reads any file).
#[cfg(unix)]
#[test]
fn an_input_its_owner_cannot_read_back_is_compressed() {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let input = d.path().join("a.safetensors");
    std::fs::write(&input, safetensors(&[8, 16])).unwrap();
    let out = d.path().join("a.ppk");
    let root = euid_is_root();
    let mut cmd = if root {
        // The file belongs to root, so `nobody` reads it through the "other" bits; the output
        // (nobody's) gets mode 044, which nobody, its owner, may not read.
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
        c.arg(env!("CARGO_BIN_EXE_planepack"));
        c
    } else {
        Command::new(env!("CARGO_BIN_EXE_planepack"))
    };
    std::fs::set_permissions(&input, std::fs::Permissions::from_mode(0o044)).unwrap();
    if !root {
        // Not root: the owner cannot read 044; give the owner read so the input is readable,
        // and check the output still gets the input's bits.
        std::fs::set_permissions(&input, std::fs::Permissions::from_mode(0o444)).unwrap();
    }
    let o = cmd
        .args(["compress", s(&input), "-o", s(&out), "-q"])
        .output()
        .expect("run planepack");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, if root { 0o044 } else { 0o444 });
}

/// Whether this process runs as root (from `id -u`).
fn euid_is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}
