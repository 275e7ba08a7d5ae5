//! Issue 17, items 2 and 11: the command's peak memory is bounded by a part (64 MiB) and by
//! the header's size, never by a tensor's size. Each run's peak resident set comes from
//! `wait4`, so runs are measured one by one.

use std::path::Path;
use std::process::Command;

/// Run `planepack args`; its exit status and peak resident memory in MiB.
#[allow(clippy::zombie_processes)] // reaped by wait4, which std does not know of
fn run_measured(args: &[&str]) -> (bool, f64) {
    let child = Command::new(env!("CARGO_BIN_EXE_planepack"))
        .args(args)
        .spawn()
        .expect("run planepack");
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, writing into the two locals only.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32, "wait4");
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    let mib = usage.ru_maxrss as f64 / 1024.0;
    eprintln!("planepack {}: peak {mib:.0} MiB", args[0]);
    (ok, mib)
}

/// A safetensors file of `header` and, after it, `data_len` bytes of zeros (sparse: no disk).
fn safetensors(path: &Path, header: &str, data_len: u64) {
    let mut f = (header.len() as u64).to_le_bytes().to_vec();
    f.extend_from_slice(header.as_bytes());
    std::fs::write(path, &f).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.set_len(f.len() as u64 + data_len).unwrap();
}

#[test]
fn peak_memory_is_bounded_by_a_part_and_by_the_header() {
    let d = tempfile::tempdir().unwrap();
    let p = |n: &str| d.path().join(n).to_str().unwrap().to_owned();

    // One U8 tensor of 1 GiB + 4 KiB (17 parts): before parts, compress held it twice (2 GiB)
    // and a 64 GiB one aborted.
    let n = (1u64 << 30) + 4096;
    safetensors(
        &d.path().join("big.safetensors"),
        &format!("{{\"t\":{{\"dtype\":\"U8\",\"shape\":[{n}],\"data_offsets\":[0,{n}]}}}}"),
        n,
    );
    let (ok, mib) = run_measured(&["compress", &p("big.safetensors"), "--codec", "zstd", "-q"]);
    assert!(ok);
    assert!(mib < 300.0, "compress: {mib:.0} MiB for a 1 GiB tensor");
    let (ok, mib) = run_measured(&["inspect", "--verify", &p("big.safetensors.ppk")]);
    assert!(ok);
    assert!(
        mib < 200.0,
        "inspect --verify: {mib:.0} MiB for a 1 GiB tensor"
    );

    // `bench` measures a tensor larger than a batch in pieces of 64 MiB (it read the tensor
    // whole: a 64 GiB one aborted).
    let (ok, mib) = run_measured(&["bench", &p("big.safetensors"), "--codecs", "raw", "--quick"]);
    assert!(ok);
    assert!(mib < 400.0, "bench: {mib:.0} MiB for a 1 GiB tensor");

    // One 1-D F32 tensor of 64 MiB through IBP, alone and in auto: IBP's bit counters were
    // per column of the one row (2.4-2.7 GB).
    let n = 16u64 << 20;
    safetensors(
        &d.path().join("flat.safetensors"),
        &format!(
            "{{\"t\":{{\"dtype\":\"F32\",\"shape\":[{n}],\"data_offsets\":[0,{}]}}}}",
            4 * n
        ),
        4 * n,
    );
    for args in [
        vec![
            "compress",
            &p("flat.safetensors"),
            "--codec",
            "ibp",
            "-q",
            "--force",
        ],
        vec![
            "compress",
            &p("flat.safetensors"),
            "--codec",
            "ibp-clusters-8",
            "-q",
            "--force",
        ],
        vec!["compress", &p("flat.safetensors"), "-q", "--force"],
        vec![
            "bench",
            &p("flat.safetensors"),
            "--codecs",
            "ibp",
            "--quick",
        ],
    ] {
        let (ok, mib) = run_measured(&args);
        assert!(ok, "{args:?}");
        assert!(mib < 500.0, "{args:?}: {mib:.0} MiB for a 64 MiB tensor");
    }

    // 300,000 empty tensors (a 20 MB header): metadata costs a small multiple of the header.
    let tensors: Vec<String> = (0..300_000)
        .map(|i| {
            format!("\"tensor.{i:07}\":{{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}")
        })
        .collect();
    let header = format!("{{{}}}", tensors.join(","));
    let header_mib = header.len() as f64 / (1 << 20) as f64;
    safetensors(&d.path().join("empty.safetensors"), &header, 0);
    let bound = 9.0 * header_mib + 40.0;
    for args in [
        vec!["compress", &p("empty.safetensors"), "-q"],
        vec![
            "decompress",
            &p("empty.safetensors.ppk"),
            "-o",
            &p("back.safetensors"),
            "-q",
        ],
    ] {
        let (ok, mib) = run_measured(&args);
        assert!(ok, "{args:?}");
        assert!(
            mib < bound,
            "{}: {mib:.0} MiB for a {header_mib:.0} MiB header (bound {bound:.0})",
            args[0]
        );
    }
    assert_eq!(
        std::fs::read(p("back.safetensors")).unwrap(),
        std::fs::read(p("empty.safetensors")).unwrap()
    );
}
