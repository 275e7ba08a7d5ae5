//! A counting global allocator for tests that bound memory: the live heap bytes and their peak
//! while a closure runs, and the largest single request. A test binary installs it with
//! `#[global_allocator] static A: planepack_testkit::alloc::Counting = Counting;` (one per
//! binary) and then measures with [`peak_during`]. Counters are process-wide, so a test that
//! measures must not share its binary with tests that run at the same time (one `#[test]`
//! function per binary, or `--test-threads=1`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Forwards every call to the system allocator and counts.
pub struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static LARGEST: AtomicUsize = AtomicUsize::new(0);

fn grew(size: usize) {
    let now = LIVE.fetch_add(size, Ordering::Relaxed) + size;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

fn asked(size: usize) {
    LARGEST.fetch_max(size, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to the system allocator unchanged; the counters are only
// bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        asked(l.size());
        // SAFETY: the caller's contract is System's.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            grew(l.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        asked(l.size());
        // SAFETY: as above.
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            grew(l.size());
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        asked(new_size);
        // SAFETY: as above.
        let q = unsafe { System.realloc(p, l, new_size) };
        if !q.is_null() {
            LIVE.fetch_sub(l.size(), Ordering::Relaxed);
            grew(new_size);
        }
        q
    }
}

/// What [`peak_during`] saw.
#[derive(Debug, Clone, Copy)]
pub struct Peak {
    /// Peak live heap bytes while the closure ran, above what was live before it.
    pub peak: usize,
    /// The largest single allocation it asked for (a request the system refused counts too:
    /// it is what a decoder must never make).
    pub largest: usize,
}

/// Run `f` and report its peak live heap bytes and its largest allocation. Only meaningful
/// where [`Counting`] is the global allocator.
pub fn peak_during<T>(f: impl FnOnce() -> T) -> (T, Peak) {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    LARGEST.store(0, Ordering::Relaxed);
    let out = f();
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(before);
    let largest = LARGEST.load(Ordering::Relaxed);
    (out, Peak { peak, largest })
}
