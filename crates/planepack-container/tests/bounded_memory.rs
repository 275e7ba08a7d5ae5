//! Issue 17, items 1 and 2: what a reader allocates is bounded by a part, not by what the
//! metadata claims. A counting allocator (this test binary's global allocator) records the
//! peak of live heap bytes while a container that claims a 16 GiB tensor is read, verified and
//! decompressed; its second part is damaged, so each operation must fail after holding about
//! two parts, where a reader that sized its buffer from the metadata would ask for 16 GiB.
//! One test function, so no other test's allocations share the counter.

use planepack_container::format::MAX_PART_LEN;
use planepack_container::{checksum, CodecId, Container, Entry, Error, Header, SourceKind};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; the counters are only
// bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is System's.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = LIVE.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Peak live heap bytes while `f` runs, above what was live before it.
fn peak_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let out = f();
    (out, PEAK.load(Ordering::Relaxed) - before)
}

#[test]
fn reading_a_claimed_16_gib_tensor_holds_two_parts_at_most() {
    const PARTS: u64 = 256;
    let part = MAX_PART_LEN;
    let total = PARTS * part;
    let json =
        format!("{{\"t\":{{\"dtype\":\"U8\",\"shape\":[{total}],\"data_offsets\":[0,{total}]}}}}");
    let p = 8 + json.len() as u64;
    let zeros = vec![0u8; part as usize];
    let payload = zstd::bulk::compress(&zeros, 3).unwrap();
    let good = checksum(&zeros);
    drop(zeros);
    let mut file = Header {
        source: SourceKind::Safetensors,
        original_len: p + total,
        preamble_len: p,
        entries: PARTS,
        payload_len: PARTS * payload.len() as u64,
    }
    .to_bytes()
    .to_vec();
    file.extend_from_slice(&(json.len() as u64).to_le_bytes());
    file.extend_from_slice(json.as_bytes());
    for k in 0..PARTS {
        let e = Entry {
            raw_offset: p + k * part,
            raw_len: part,
            payload_offset: k * payload.len() as u64,
            payload_len: payload.len() as u64,
            // The second part's raw checksum is wrong: decoding stops there.
            raw_checksum: if k == 1 { !good } else { good },
            payload_checksum: checksum(&payload),
            codec: CodecId::Zstd,
            elem: 3,
            level: 3,
        };
        file.extend_from_slice(&e.to_bytes());
    }
    let sum = checksum(&file);
    file.extend_from_slice(&sum.to_le_bytes());
    for _ in 0..PARTS {
        file.extend_from_slice(&payload);
    }
    assert!(file.len() < 2 << 20, "{} bytes", file.len());

    let (c, meta_peak) = peak_during(|| Container::parse(&file[..], "t").unwrap());
    assert!(meta_peak < 4 * file.len(), "parse: {meta_peak} bytes");
    assert_eq!(c.parts(0).len(), PARTS as usize);
    let limit = 2 * part as usize + (16 << 20);
    for (what, run) in [
        (
            "read",
            Box::new(|| c.read(0).map(drop)) as Box<dyn Fn() -> _>,
        ),
        ("verify", Box::new(|| c.verify())),
        (
            "decompress_to",
            Box::new(|| c.decompress_to(&mut std::io::sink(), |_| {})),
        ),
    ] {
        let (result, peak) = peak_during(run);
        match result {
            Err(Error::Corrupt(m)) => assert!(m.contains("decoded bytes"), "{what}: {m}"),
            other => panic!("{what}: {other:?}"),
        }
        assert!(peak < limit, "{what}: peak {peak} bytes, limit {limit}");
    }
}
