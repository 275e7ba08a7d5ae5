//! A compressed group of rows in one of the two layouts, with decode-all and gather.
//!
//! * **In-place** (the reference's `compress_inplace`): row `i` keeps its slot
//!   `[i*V*B, (i+1)*V*B)`; the compressed prefix is followed by zeros. No offsets are needed and
//!   host memory does not shrink; only the bytes a reader pulls across the link do.
//! * **Condensed** (`compress_condensed`): rows back to back with the reference's int64
//!   *inclusive* end offsets. The reference has no decoder for it; this one does.
//!
//! Both carry the row bitmask (`u32` words, bit `i % 32` of word `i / 32` = row `i` packed).

use crate::row::{bitmap, decode_row, encode_row, packed_end, Columns};
use crate::wide::{self, Deposits, Lane};
use crate::Rows;
use planepack_core::{Error, Result};

/// Which layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    InPlace,
    Condensed,
}

/// A compressed group of rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompressedRows {
    pub layout: Layout,
    pub rows: usize,
    /// Bytes of one raw row (`V * B`).
    pub row_bytes: usize,
    pub data: Vec<u8>,
    /// Condensed only: inclusive end offset of each row.
    pub offsets: Vec<u64>,
    pub row_bitmask: Vec<u32>,
    /// Condensed: equals `data.len()`. In-place: the sum of the rows' stored sizes, i.e. what a
    /// reader fetches.
    pub payload_bytes: usize,
}

/// Compress every row of `rows` with `cols`.
pub fn compress(rows: &Rows, cols: &Columns, layout: Layout) -> CompressedRows {
    compress_each(rows, |_| cols, layout)
}

/// Compress every row of `rows`, row `i` with `cols_of(i)` (the clustered stream gives each
/// row its cluster's columns). Panics if a `Columns` is for rows of another length.
pub fn compress_each<'c>(
    rows: &Rows,
    cols_of: impl Fn(usize) -> &'c Columns,
    layout: Layout,
) -> CompressedRows {
    let rb = rows.row_bytes();
    let mut out = CompressedRows {
        layout,
        rows: rows.count,
        row_bytes: rb,
        data: Vec::new(),
        offsets: Vec::new(),
        row_bitmask: vec![0; rows.count.div_ceil(32)],
        payload_bytes: 0,
    };
    let mut scratch = vec![0u8; rb];
    if layout == Layout::InPlace {
        out.data = vec![0u8; rows.count * rb];
    }
    for i in 0..rows.count {
        let cols = cols_of(i);
        assert_eq!(cols.row_bytes(), rb, "columns for rows of another length");
        let (n, packed) = encode_row(rows.row(i), cols, &mut scratch);
        out.row_bitmask[i / 32] |= (packed as u32) << (i % 32);
        out.payload_bytes += n;
        match layout {
            Layout::InPlace => out.data[i * rb..i * rb + n].copy_from_slice(&scratch[..n]),
            Layout::Condensed => {
                out.data.extend_from_slice(&scratch[..n]);
                out.offsets.push(out.data.len() as u64);
            }
        }
    }
    out
}

impl CompressedRows {
    /// Is row `i` stored packed (bitmask bit set)?
    #[inline]
    pub fn is_packed(&self, i: usize) -> bool {
        self.row_bitmask[i / 32] >> (i % 32) & 1 == 1
    }

    /// Check the structure before decoding untrusted data: lengths, offsets, bitmask.
    pub fn validate(&self) -> Result<()> {
        if self.row_bitmask.len() != self.rows.div_ceil(32) {
            return Err(Error::corrupt(
                "row bitmask length does not match the row count",
            ));
        }
        if !self.rows.is_multiple_of(32)
            && self
                .row_bitmask
                .last()
                .is_some_and(|w| w >> (self.rows % 32) != 0)
        {
            return Err(Error::corrupt("row bitmask has bits set past the last row"));
        }
        match self.layout {
            Layout::InPlace => {
                if Some(self.data.len()) != self.rows.checked_mul(self.row_bytes) {
                    return Err(Error::corrupt("in-place data is not rows x row bytes"));
                }
            }
            Layout::Condensed => {
                if self.offsets.len() != self.rows {
                    return Err(Error::corrupt(
                        "offset table length does not match the row count",
                    ));
                }
                let mut prev = 0u64;
                for (i, &o) in self.offsets.iter().enumerate() {
                    let size = o
                        .checked_sub(prev)
                        .ok_or_else(|| Error::corrupt(format!("row {i}: offsets decrease")))?;
                    if size > self.row_bytes as u64
                        || (size == self.row_bytes as u64) == self.is_packed(i)
                    {
                        return Err(Error::corrupt(format!(
                            "row {i}: size {size} disagrees with its bitmask bit"
                        )));
                    }
                    prev = o;
                }
                if prev != self.data.len() as u64 {
                    return Err(Error::corrupt("last offset is not the data length"));
                }
            }
        }
        Ok(())
    }

    /// Decode row `i` into `out` (`row_bytes` long).
    #[inline]
    pub fn decode_row(&self, cols: &Columns, i: usize, out: &mut [u8]) -> Result<()> {
        self.check(cols, out.len(), 1)?;
        if i >= self.rows {
            return Err(Error::corrupt(format!(
                "row index {i} out of range (rows: {})",
                self.rows
            )));
        }
        decode_one(self, cols, i, out)
    }

    /// Decode every row into `out` (`rows * row_bytes`).
    pub fn decode_all(&self, cols: &Columns, out: &mut [u8]) -> Result<()> {
        self.check(cols, out.len(), self.rows)?;
        decode_rows(self, cols, 0..self.rows, out)
    }

    /// Decode the rows `indices` (any order, repeats allowed) into `out`, row `k` of the
    /// output being row `indices[k]`: the embedding-lookup and KV-fetch case.
    pub fn gather(&self, cols: &Columns, indices: &[usize], out: &mut [u8]) -> Result<()> {
        self.check(cols, out.len(), indices.len())?;
        if let Some(&i) = indices.iter().find(|&&i| i >= self.rows) {
            return Err(Error::corrupt(format!(
                "row index {i} out of range (rows: {})",
                self.rows
            )));
        }
        decode_rows(self, cols, indices.iter().copied(), out)
    }

    /// What every decode checks first, in constant time (the fields are public, so a caller
    /// may have filled them from anywhere): the tables have the lengths the row count says,
    /// so no row's lookup reads past them; each row's span is then checked where it is read.
    /// [`CompressedRows::validate`] checks the rest (offsets against the bitmask), in time
    /// linear in the rows.
    fn check(&self, cols: &Columns, out_len: usize, rows: usize) -> Result<()> {
        if self.row_bitmask.len() != self.rows.div_ceil(32) {
            return Err(Error::corrupt(
                "row bitmask length does not match the row count",
            ));
        }
        let table_ok = match self.layout {
            Layout::InPlace => Some(self.data.len()) == self.rows.checked_mul(self.row_bytes),
            Layout::Condensed => self.offsets.len() == self.rows,
        };
        if !table_ok {
            return Err(Error::corrupt(
                "data or offset table does not match the row count",
            ));
        }
        if cols.row_bytes() != self.row_bytes {
            return Err(Error::corrupt(format!(
                "mask has {} bytes per row, the data {}",
                cols.row_bytes(),
                self.row_bytes
            )));
        }
        let expected = rows
            .checked_mul(self.row_bytes)
            .ok_or_else(|| Error::corrupt("rows x row bytes overflows"))?;
        if out_len != expected {
            return Err(Error::OutputLength {
                expected,
                provided: out_len,
            });
        }
        Ok(())
    }
}

/// Where the rows of a group are stored: what the group decoder needs. A
/// [`CompressedRows`] in either layout, or the rows of an `Ibp` stream.
pub(crate) trait Placement {
    /// The bytes the rows are in (a row's reads may run past its end, never past this).
    fn data(&self) -> &[u8];
    /// Where row `i` starts in [`Placement::data`].
    fn start(&self, i: usize) -> usize;
    /// The bytes of row `i` (for in-place, its whole slot).
    fn span(&self, i: usize) -> Result<&[u8]>;
    fn is_packed(&self, i: usize) -> bool;
    /// Must a row decode from exactly its span (rows back to back)?
    fn exact(&self) -> bool;
}

impl Placement for CompressedRows {
    fn data(&self) -> &[u8] {
        &self.data
    }
    fn start(&self, i: usize) -> usize {
        match self.layout {
            Layout::InPlace => i * self.row_bytes,
            Layout::Condensed if i == 0 => 0,
            Layout::Condensed => self.offsets[i - 1] as usize,
        }
    }
    fn span(&self, i: usize) -> Result<&[u8]> {
        let start = self.start(i);
        let end = match self.layout {
            Layout::InPlace => (i + 1) * self.row_bytes,
            Layout::Condensed => self.offsets[i] as usize,
        };
        self.data
            .get(start..end)
            .ok_or_else(|| Error::corrupt(format!("row {i}: span {start}..{end} outside the data")))
    }
    fn is_packed(&self, i: usize) -> bool {
        CompressedRows::is_packed(self, i)
    }
    fn exact(&self) -> bool {
        self.layout == Layout::Condensed
    }
}

/// Decode row `i` alone (the scalar decoder).
pub(crate) fn decode_one<P: Placement>(
    rows: &P,
    cols: &Columns,
    i: usize,
    out: &mut [u8],
) -> Result<()> {
    let src = rows.span(i)?;
    let used = decode_row(src, rows.is_packed(i), cols, out)
        .map_err(|e| Error::corrupt(format!("row {i}: {e}")))?;
    check_used(rows, i, used, src.len())
}

/// A row stored back to back must decode from exactly the bytes it was given.
fn check_used<P: Placement>(rows: &P, i: usize, used: usize, span: usize) -> Result<()> {
    if rows.exact() && used != span {
        return Err(Error::corrupt(format!(
            "row {i}: decodes from {used} bytes but is stored in {span}"
        )));
    }
    Ok(())
}

/// Decode `which` (valid row indices) into consecutive row-sized slots of `out`. Packed rows
/// go several at a time through [`wide::decode`] where that pays ([`wide::pays`]); raw rows,
/// the rest of a group and rows too close to the end of the data for its reads take the
/// scalar decoder. Both apply the same checks.
pub(crate) fn decode_rows<P: Placement>(
    rows: &P,
    cols: &Columns,
    which: impl Iterator<Item = usize>,
    out: &mut [u8],
) -> Result<()> {
    let rb = cols.row_bytes();
    let count = out.len() / rb.max(1);
    let deposits = (wide::pays(cols, count) && wide::supports(rows.data(), cols.b()))
        .then(|| Deposits::new(cols));
    let lanes = wide::lanes(cols.b());
    let mut group: Vec<Lane> = Vec::with_capacity(lanes);
    for (i, dst) in which.zip(out.chunks_exact_mut(rb.max(1))) {
        let start = rows.start(i);
        let wide_ok =
            deposits.is_some() && rows.is_packed(i) && wide::fits(rows.data(), start, cols);
        if !wide_ok {
            decode_one(rows, cols, i, dst)?;
            continue;
        }
        group.push(Lane {
            row: i,
            start,
            out: dst,
        });
        if let Some(dep) = deposits.as_ref().filter(|_| group.len() == lanes) {
            decode_group(rows, cols, dep, &mut group)?;
            group.clear();
        }
    }
    for lane in group {
        decode_one(rows, cols, lane.row, lane.out)?;
    }
    Ok(())
}

/// A full group of packed rows that [`wide::fits`]: bitmaps checked, fields decoded in
/// lockstep, then each row's end checked as the scalar decoder does.
fn decode_group<P: Placement>(
    rows: &P,
    cols: &Columns,
    dep: &Deposits,
    group: &mut [Lane],
) -> Result<()> {
    let corrupt = |i: usize, e: &str| Error::corrupt(format!("row {i}: {e}"));
    for lane in group.iter() {
        bitmap(&rows.data()[lane.start..], cols).map_err(|e| corrupt(lane.row, e))?;
    }
    let ends = match cols.b() {
        8 => wide::decode::<8>(rows.data(), group, cols, dep),
        _ => wide::decode::<4>(rows.data(), group, cols, dep),
    };
    for (lane, p) in group.iter().zip(ends) {
        let src = rows.span(lane.row)?;
        let used = match cols.b() {
            8 => packed_end::<8>(src, cols, p),
            _ => packed_end::<4>(src, cols, p),
        }
        .map_err(|e| corrupt(lane.row, e))?;
        check_used(rows, lane.row, used, src.len())?;
    }
    Ok(())
}
