//! IBP row groups built from untrusted parts: a mask and bitval, a layout, a row count, the
//! row bitmask, the condensed layout's offsets and the row bytes all come from the input, as
//! they would from a file or a network peer. Decoding all rows, single rows and gathers
//! must return rows or an error, whether or not the caller ran `validate` first; and the
//! CPU's fast paths (BMI2 deposits, AVX2 lockstep rows) must agree with the portable loops:
//! the same rows, or both an error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use planepack_ibp::BitOps;
use planepack_ibp::{Columns, CompressedRows, Layout, Mask};

/// Reads the input front to back; past its end, zeros.
struct Take<'a>(&'a [u8]);

impl Take<'_> {
    fn u8(&mut self) -> u8 {
        let (b, rest) = self.0.split_first().map_or((0, &[][..]), |(b, r)| (*b, r));
        self.0 = rest;
        b
    }
    fn u64(&mut self, bytes: usize) -> u64 {
        (0..bytes).fold(0, |v, i| v | (self.u8() as u64) << (8 * i))
    }
}

fuzz_target!(|data: &[u8]| {
    let mut t = Take(data);
    let width = [16u32, 32, 64][t.u8() as usize % 3];
    let cols = 1 + t.u8() as usize % 24;
    let rows = t.u8() as usize % 48;
    let flags = t.u8();
    let layout = if flags & 1 == 0 { Layout::InPlace } else { Layout::Condensed };
    let ones = if width == 64 { u64::MAX } else { (1u64 << width) - 1 };
    let mask: Vec<u64> = (0..cols).map(|_| t.u64(8) & ones).collect();
    let bitval: Vec<u64> = mask.iter().map(|m| t.u64(8) & m).collect();
    let m = Mask { width, mask, bitval };
    let columns = Columns::new(&m);
    let portable = Columns::with_ops(&m, BitOps::portable());
    let row_bytes = if flags & 2 == 0 {
        columns.row_bytes()
    } else {
        t.u8() as usize
    };
    let row_bitmask: Vec<u32> = (0..rows.div_ceil(32) + (flags >> 2 & 1) as usize)
        .map(|_| t.u64(4) as u32)
        .collect();
    let offsets: Vec<u64> = match layout {
        Layout::InPlace => Vec::new(),
        Layout::Condensed => (0..rows).map(|_| t.u64(2)).collect(),
    };
    let data = t.0.to_vec();
    let group = CompressedRows {
        layout,
        rows,
        row_bytes,
        payload_bytes: data.len(),
        data,
        offsets,
        row_bitmask,
    };
    let valid = group.validate().is_ok();
    let mut out = vec![0u8; rows * row_bytes];
    let all = group.decode_all(&columns, &mut out);
    // Differential: the portable loops decide the same way and give the same rows.
    let mut slow = vec![0u8; rows * row_bytes];
    let all_slow = group.decode_all(&portable, &mut slow);
    assert_eq!(all.is_ok(), all_slow.is_ok(), "fast path and portable disagree on validity");
    if all.is_ok() {
        assert!(out == slow, "fast path and portable decode differently");
    }
    if valid && row_bytes == columns.row_bytes() {
        // Rows one at a time and a gather give what decoding all of them gave.
        let mut row = vec![0u8; row_bytes];
        for i in 0..rows {
            let one = group.decode_row(&columns, i, &mut row);
            if let (Ok(()), Ok(())) = (&all, &one) {
                assert!(row == out[i * row_bytes..(i + 1) * row_bytes], "row {i}");
            }
        }
        let picks: Vec<usize> = (0..rows).rev().chain(0..rows.min(3)).collect();
        let mut gathered = vec![0u8; picks.len() * row_bytes];
        if let (Ok(()), Ok(())) = (&all, &group.gather(&columns, &picks, &mut gathered)) {
            for (k, &i) in picks.iter().enumerate() {
                assert!(gathered[k * row_bytes..(k + 1) * row_bytes] == out[i * row_bytes..(i + 1) * row_bytes]);
            }
        }
    }
    let mut row = vec![0u8; row_bytes];
    let _ = group.decode_row(&columns, rows, &mut row);
    let _ = group.gather(&columns, &[rows], &mut row);
});
