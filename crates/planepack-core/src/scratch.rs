//! Scratch memory a thread keeps from one call to the next.
//!
//! A chunked coder needs buffers a few times a chunk's size (planes, lane words, staging,
//! tables). Made fresh for every call, or for every task of a parallel call, they are grown
//! again and their new pages faulted in every time: on a 1 MiB BF16 array coded by `rans` on
//! two threads that made each 64 KiB chunk take about 30 % longer than on one thread with
//! warm buffers, and the two-thread encode 1.3 times as fast as one thread's instead of 1.6.
//! So each thread keeps its last scratch in a thread-local slot, taken for a call ([`take`])
//! and put back when the call's guard drops, but not while a panic unwinds: a scratch a
//! panic interrupted is dropped, so nothing a panic interrupted is used again (the container
//! catches codec panics and goes on). A call made while the slot is taken (a nested one, as
//! a rayon worker may start another task while it waits) starts from an empty scratch:
//! nothing is shared, nothing is borrowed twice. A kept scratch promises nothing about its
//! contents: the coders overwrite what they read, as they did from chunk to chunk.
//!
//! What a slot holds stays allocated while the thread lives, so a codec puts a scratch back
//! only where it is bounded (`keep`), e.g. by the default chunk size, not by the largest chunk
//! a caller may ask for.

use std::cell::Cell;
use std::thread::LocalKey;

/// A thread-local slot for a scratch of type `T`: declare one with
/// `thread_local!(static NAME: Slot<T> = const { Cell::new(None) });`.
pub type Slot<T> = Cell<Option<T>>;

/// This thread's scratch from `slot` (a new `T` where the slot is empty), for as long as the
/// guard lives; dropped, the guard puts it back if `keep` and no panic is unwinding.
pub fn take<T: Default + 'static>(slot: &'static LocalKey<Slot<T>>, keep: bool) -> Taken<T> {
    let value = slot.try_with(Cell::take).ok().flatten().unwrap_or_default();
    Taken { slot, value, keep }
}

/// A scratch taken from its thread's slot ([`take`]); it dereferences to the scratch.
pub struct Taken<T: Default + 'static> {
    slot: &'static LocalKey<Slot<T>>,
    value: T,
    keep: bool,
}

impl<T: Default> std::ops::Deref for Taken<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: Default> std::ops::DerefMut for Taken<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.value
    }
}

impl<T: Default> Drop for Taken<T> {
    fn drop(&mut self) {
        if self.keep && !std::thread::panicking() {
            let value = std::mem::take(&mut self.value);
            // (A thread being torn down has no slot left to keep it in: then it is dropped.)
            let _ = self.slot.try_with(|s| s.set(Some(value)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local!(static SLOT: Slot<Vec<u8>> = const { Cell::new(None) });

    #[test]
    fn a_kept_scratch_comes_back_and_a_nested_take_gets_its_own() {
        {
            let mut v = take(&SLOT, true);
            assert!(v.is_empty());
            v.extend_from_slice(&[1, 2, 3]);
            // The slot is taken: a nested take starts empty and does not see the outer one.
            let mut inner = take(&SLOT, true);
            assert!(inner.is_empty());
            inner.push(9);
            drop(inner);
        }
        // The outer guard dropped last: its scratch is the one kept.
        assert_eq!(*take(&SLOT, false), [1, 2, 3]);
        // Not kept: the next take starts empty.
        assert!(take(&SLOT, true).is_empty());
        // A scratch a panic interrupted is dropped, not put back.
        take(&SLOT, true).push(7);
        let caught = std::panic::catch_unwind(|| {
            let mut v = take(&SLOT, true);
            assert_eq!(*v, [7]);
            v.push(8);
            panic!("a coder's bug");
        });
        assert!(caught.is_err());
        assert!(take(&SLOT, false).is_empty());
    }
}
