//! Invariant Bit Packing (IBP; Kamath et al., EuroSys 2026).
//!
//! For a group of rows (GNN vertex features, embedding-table rows, the K or V vectors of one
//! layer), the bits that nearly every row agrees on, column by column, are kept once in a
//! *mask* and *bitval*; each row stores a participation bitmap and only its variable bits. Rows
//! stay individually addressable and decode with one pass of bit operations.
//!
//! The row format is byte-compatible with the authors' library (the test vectors of the
//! reference pass); `docs/format-ibp.md` specifies it and this crate's own stream container.
//!
//! The public surface: [`Ibp`] (the [`Codec`], a self-contained stream), [`Rows`] and
//! [`preprocess`] / [`compress`] to build a [`Mask`] and a [`CompressedRows`] group yourself,
//! its decode-all and gather, and [`KvStream`] (a KV cache: mask from the prompt, rows
//! appended one at a time). Inside: `mask` (bit counting, thresholds, the sweep and
//! sampling), `row` (one row, BMI2 `pext`/`pdep` when the CPU has it), `layout` (in-place and
//! condensed groups), `cluster` (k-means masks), `bits`, and `wide` (packed rows four at a
//! time with AVX2). [`internals`] re-exports what the GPU crate, the fuzz targets and the
//! tests reach in there; it is not a stable API.
//!
//! ```
//! use planepack_core::{Codec, ElemType};
//! use planepack_ibp::{compress, preprocess, Columns, Ibp, Layout, Rows, Sample, Threshold};
//!
//! // 64 rows of 96 FP32 values in [1, 2): sign and exponent the same in every row.
//! let values: Vec<f32> = (0..64 * 96).map(|i| 1.0 + (i % 97) as f32 / 97.0).collect();
//! let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
//!
//! // A self-contained stream, as the container stores it.
//! let mut stream = Vec::new();
//! Ibp::default().encode_shaped(&bytes, ElemType::F32, &[64, 96], &mut stream)?;
//! assert!(stream.len() < bytes.len());
//! let mut back = vec![0u8; bytes.len()];
//! Ibp::default().decode(&stream, &mut back)?;
//! assert_eq!(back, bytes);
//!
//! // A group of rows with its mask, and a gather of three of them.
//! let rows = Rows::new(&bytes, 96 * 4, 32)?;
//! let pre = preprocess(&rows, Threshold::Sweep, Sample::All);
//! let cols = Columns::new(&pre.mask);
//! let group = compress(&rows, &cols, Layout::Condensed);
//! let mut three = vec![0u8; 3 * 96 * 4];
//! group.gather(&cols, &[5, 0, 63], &mut three)?;
//! assert_eq!(&three[..96 * 4], &bytes[5 * 96 * 4..6 * 96 * 4]);
//! # Ok::<(), planepack_core::Error>(())
//! ```

mod bits;
mod cluster;
mod layout;
mod mask;
mod row;
/// AVX2 lockstep decoding of several rows: internal, its reads are sound only for `Columns`
/// built by this crate.
pub(crate) mod wide;

pub use bits::BitOps;
pub use layout::{compress, CompressedRows, Layout};
pub use mask::{preprocess, Mask, Preprocessed, Sample, Threshold};
pub use row::Columns;

/// The pieces the GPU encoder and decoder (their CPU twins and host-side steps), the fuzz
/// targets and the tests use: not a stable API.
#[doc(hidden)]
pub mod internals {
    pub use crate::bits::ones;
    pub use crate::cluster::{
        assign_fitted_on, cluster_of, id_bits, kmeans, write_masks, FIT_ROWS, ITERATIONS, SEED,
    };
    pub use crate::layout::compress_each;
    pub use crate::mask::{score, BitCounts, SWEEP};
    pub use crate::row::{chunk, decode_row, encode_row, packed_size, stored_len};
}

use planepack_core::codec::check_output_len;
use planepack_core::error::{stream_header, take};
use planepack_core::{Codec, ElemType, Error, Result};

/// A 2-D view of raw bytes: `count` rows of `columns` chunks of `width` bits.
#[derive(Debug, Clone, Copy)]
pub struct Rows<'a> {
    pub data: &'a [u8],
    pub count: usize,
    pub columns: usize,
    pub width: u32,
}

impl<'a> Rows<'a> {
    /// View `data` as rows of `row_bytes` bytes cut into `width`-bit chunks. `data` must hold
    /// whole rows and `row_bytes` whole chunks.
    pub fn new(data: &'a [u8], row_bytes: usize, width: u32) -> Result<Rows<'a>> {
        let b = (width / 8) as usize;
        if !matches!(width, 16 | 32 | 64) {
            return Err(Error::Unsupported(format!(
                "IBP chunk width {width} (16, 32 or 64)"
            )));
        }
        if row_bytes == 0 || !row_bytes.is_multiple_of(b) || !data.len().is_multiple_of(row_bytes) {
            return Err(Error::Unsupported(format!(
                "{} bytes are not whole rows of {row_bytes} bytes in {b}-byte chunks",
                data.len()
            )));
        }
        Ok(Rows {
            data,
            count: data.len() / row_bytes,
            columns: row_bytes / b,
            width,
        })
    }

    pub fn row_bytes(&self) -> usize {
        self.columns * (self.width / 8) as usize
    }

    /// Row `r`'s bytes.
    #[inline]
    pub fn row(&self, r: usize) -> &'a [u8] {
        let rb = self.row_bytes();
        &self.data[r * rb..(r + 1) * rb]
    }

    /// Row `r`'s chunks as integers.
    #[inline]
    pub fn row_chunks(&self, r: usize) -> impl Iterator<Item = u64> + 'a {
        self.row(r)
            .chunks_exact((self.width / 8) as usize)
            .map(row::le_word)
    }
}

/// A KV cache compressed as the authors' LLM integration does: the mask comes from the prompt's
/// rows (threshold 0.8 by default), then each new token's row is compressed as it arrives.
pub struct KvStream {
    pub mask: Mask,
    cols: Columns,
    rows: CompressedRows,
    scratch: Vec<u8>,
}

impl KvStream {
    /// Start from the prompt's rows; the mask is computed from them alone.
    pub fn from_prompt(prompt: &Rows, threshold: f32) -> KvStream {
        let p = preprocess(prompt, Threshold::Fixed(threshold), Sample::All);
        let cols = Columns::new(&p.mask);
        let rows = compress(prompt, &cols, Layout::Condensed);
        KvStream {
            scratch: vec![0; cols.row_bytes()],
            mask: p.mask,
            cols,
            rows,
        }
    }

    /// Append one row (one token's vector).
    pub fn append(&mut self, row: &[u8]) -> Result<()> {
        check_output_len(self.cols.row_bytes(), row)?;
        let (n, packed) = row::encode_row(row, &self.cols, &mut self.scratch);
        let i = self.rows.rows;
        if i.is_multiple_of(32) {
            self.rows.row_bitmask.push(0);
        }
        self.rows.row_bitmask[i / 32] |= (packed as u32) << (i % 32);
        self.rows.data.extend_from_slice(&self.scratch[..n]);
        self.rows.offsets.push(self.rows.data.len() as u64);
        self.rows.payload_bytes += n;
        self.rows.rows += 1;
        Ok(())
    }

    pub fn rows(&self) -> &CompressedRows {
        &self.rows
    }

    /// Fetch rows by index (the critical tokens a sparse-attention policy picked).
    pub fn gather(&self, indices: &[usize], out: &mut [u8]) -> Result<()> {
        self.rows.gather(&self.cols, indices, out)
    }

    /// Bytes held: rows, offsets, bitmask, mask and bitval.
    pub fn stored_bytes(&self) -> usize {
        self.rows.data.len()
            + 8 * self.rows.offsets.len()
            + 4 * self.rows.row_bitmask.len()
            + self.mask.metadata_bytes()
    }
}

// ---------------------------------------------------------------------------------------------
// The self-contained stream used through the `Codec` trait.

/// Stream magic: "PPIB".
pub const MAGIC: [u8; 4] = *b"PPIB";
/// The fewest rows the encoder codes with a mask, and the fewest rows per mask with clusters.
/// A mask and its bitval cost two rows' bytes, so with fewer rows they cannot pay for much,
/// and the encoder's working memory (masks and column tables of 16 to 44 bytes a column)
/// would be several times the tensor for a few very long rows (a 1-D tensor is one row). No
/// tensor of the datasets was coded with rows below this; the format allows any count.
pub const MIN_ROWS: usize = 16;
const HEADER: usize = 32;

/// IBP behind the [`Codec`] trait.
///
/// The tensor's last dimension is a row (`encode_shaped`); without a shape, rows of
/// `default_row_bytes`. The chunk width is the widest of 64, 32, 16 bits that divides the row,
/// unless fixed. Everything the decoder needs travels in the stream and counts in the ratio:
/// mask, bitval, row bitmask, the rows (condensed, no offsets: a reader walks them), and the
/// bytes after the last whole row; with clusters, every cluster's mask and bitval and each
/// row's cluster id.
#[derive(Debug, Clone, Copy)]
pub struct Ibp {
    pub width: Option<u32>,
    pub threshold: Threshold,
    pub sample: Sample,
    pub default_row_bytes: usize,
    /// Masks per group: above 1, rows are clustered by Hamming k-means into at most this many
    /// clusters (`cluster::assign`), each with its own mask (stream version 2); 1 writes the
    /// one-mask stream (version 1). Decoding reads whichever the stream holds.
    pub clusters: usize,
}

impl Default for Ibp {
    fn default() -> Self {
        Ibp {
            width: None,
            threshold: Threshold::Sweep,
            sample: Sample::All,
            default_row_bytes: 1024,
            clusters: 1,
        }
    }
}

impl Ibp {
    /// How [`Ibp::encode_rows`] cuts `len` bytes into rows of `row_bytes`: the chunk width and
    /// the bytes in whole rows (the rest are tail bytes); None when rows of that length cannot
    /// be IBP-coded (no length, not whole 16-bit chunks, or fewer than [`MIN_ROWS`] rows), so
    /// the tensor is stored whole. The GPU encoder cuts with it too.
    pub fn split_rows(&self, len: usize, row_bytes: usize) -> Option<(u32, usize)> {
        let width = self.pick_width(row_bytes).filter(|_| row_bytes > 0)?;
        (len / row_bytes >= MIN_ROWS).then_some((width, len / row_bytes * row_bytes))
    }

    /// The clusters the encoder fits on `rows` rows: the configured count, at most one per
    /// [`MIN_ROWS`] rows (1: one mask).
    pub fn clusters_for(&self, rows: usize) -> usize {
        self.clusters.clamp(1, (rows / MIN_ROWS).max(1))
    }

    /// The chunk width for rows of `row_bytes` bytes: the configured one if it divides the
    /// row, else the widest of 64, 32, 16 that does; None: the row cannot be IBP-coded.
    pub fn pick_width(&self, row_bytes: usize) -> Option<u32> {
        match self.width {
            Some(w) => row_bytes.is_multiple_of(w as usize / 8).then_some(w),
            None => [64u32, 32, 16]
                .into_iter()
                .find(|w| row_bytes.is_multiple_of(*w as usize / 8)),
        }
    }

    /// Encode with rows of `row_bytes` bytes. When IBP would not shrink the tensor (no mask
    /// worth keeping, or metadata larger than what the rows save), the stream holds no rows
    /// and the whole tensor as tail bytes: 32 bytes over raw. Returns what preprocessing
    /// chose for each cluster (one entry without clusters), whether or not rows were kept.
    pub fn encode_rows(
        &self,
        input: &[u8],
        row_bytes: usize,
        out: &mut Vec<u8>,
    ) -> Result<Vec<Preprocessed>> {
        let start = out.len();
        let pre = self.encode_rows_as_given(input, row_bytes, out)?;
        let masks: Vec<Mask> = pre.iter().map(|p| p.mask.clone()).collect();
        if !keeps_rows(out.len() - start, input.len(), &masks) {
            out.truncate(start);
            self.encode_rows_as_given(input, 0, out)?;
        }
        Ok(pre)
    }

    fn encode_rows_as_given(
        &self,
        input: &[u8],
        row_bytes: usize,
        out: &mut Vec<u8>,
    ) -> Result<Vec<Preprocessed>> {
        if row_bytes == 0 {
            write_stored(input, out);
            return Ok(vec![]);
        }
        // A row that is not whole chunks cannot be IBP-coded: store everything as tail bytes.
        let (width, whole) = self.split_rows(input.len(), row_bytes).unwrap_or((16, 0));
        let rows = if whole > 0 {
            Rows::new(&input[..whole], row_bytes, width)?
        } else {
            Rows {
                data: &[],
                count: 0,
                columns: 0,
                width,
            }
        };
        let clusters = self.clusters_for(rows.count);
        let (cluster, used) = if clusters > 1 {
            cluster::assign(&rows, clusters)
        } else {
            (vec![], 1)
        };
        let pre = if rows.count == 0 {
            vec![Preprocessed {
                mask: Mask::empty(width, 0),
                threshold: 0.0,
                score: 0,
                tried: vec![],
            }]
        } else if used > 1 {
            cluster::masks(&rows, &cluster, used, self.threshold, self.sample)
        } else {
            vec![preprocess(&rows, self.threshold, self.sample)]
        };
        let masks: Vec<Mask> = pre.iter().map(|p| p.mask.clone()).collect();
        let cols: Vec<Columns> = masks.iter().map(Columns::new).collect();
        let cluster = if used > 1 { cluster } else { vec![] };
        let packed = layout::compress_each(
            &rows,
            |i| &cols[cluster::cluster_of(&cluster, i)],
            Layout::Condensed,
        );
        write_stream(
            &StreamParts {
                columns: rows.columns,
                rows: rows.count,
                masks: &masks,
                row_cluster: &cluster,
                row_bitmask: &packed.row_bitmask,
                condensed: &packed.data,
                tail: &input[whole..],
            },
            out,
        );
        Ok(pre)
    }
}

/// The row length `encode_shaped` uses for `len` bytes of `elem`s shaped `shape`: the last
/// dimension in bytes (the whole tensor for a shape without dimensions).
pub fn shaped_row_bytes(len: usize, elem: ElemType, shape: &[usize]) -> usize {
    shape.last().copied().unwrap_or(len / elem.size().max(1)) * elem.size()
}

/// Whether a stream of `stream_len` bytes with rows coded under `masks` (one per cluster) is
/// kept, or the whole input of `input_len` bytes is stored as tail bytes instead
/// ([`write_stored`]): rows are kept only when a mask has invariant bits and the stream is
/// smaller than header + input.
pub fn keeps_rows(stream_len: usize, input_len: usize, masks: &[Mask]) -> bool {
    stream_len < HEADER + input_len && masks.iter().any(|m| m.invariant_bits() > 0)
}

/// The stream that holds `input` entirely as tail bytes.
pub fn write_stored(input: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&[1, 64, 0, 0]);
    out.extend_from_slice(&[0u8; 16]);
    out.extend_from_slice(&(input.len() as u64).to_le_bytes());
    out.extend_from_slice(input);
}

/// The parts of an `Ibp` stream with rows (docs/format-ibp.md, "planepack stream container").
pub struct StreamParts<'a> {
    pub columns: usize,
    pub rows: usize,
    /// One mask per cluster (one: a version-1 stream); their width is the stream's `W`.
    pub masks: &'a [Mask],
    /// Every row's cluster, below `masks.len()`; empty with one mask.
    pub row_cluster: &'a [u8],
    pub row_bitmask: &'a [u32],
    /// The rows, condensed, without offsets.
    pub condensed: &'a [u8],
    pub tail: &'a [u8],
}

/// Write an `Ibp` stream from its parts: the one writer of the layout, for the CPU encoder and
/// the GPU encoder (`planepack-gpu`) alike.
/// Panics if `masks` is empty or longer than `cluster::MAX_CLUSTERS`, or if clusters do not
/// come with one id per row.
pub fn write_stream(p: &StreamParts, out: &mut Vec<u8>) {
    let c = p.masks.len();
    assert!((1..=cluster::MAX_CLUSTERS).contains(&c), "{c} masks");
    assert!(
        c == 1 || p.row_cluster.len() == p.rows,
        "a cluster id per row"
    );
    let width = p.masks[0].width;
    let b = (width / 8) as usize;
    let raw_len = p.rows * p.columns * b + p.tail.len();
    let (version, clusters) = if c == 1 { (1, 0) } else { (2, c as u8) };
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&[version, width as u8, clusters, 0]);
    out.extend_from_slice(&(p.columns as u64).to_le_bytes());
    out.extend_from_slice(&(p.rows as u64).to_le_bytes());
    out.extend_from_slice(&(raw_len as u64).to_le_bytes());
    cluster::write_masks(p.masks, out);
    if c > 1 {
        cluster::pack_ids(p.row_cluster, c, out);
    }
    for w in p.row_bitmask {
        out.extend_from_slice(&w.to_le_bytes());
    }
    out.extend_from_slice(p.condensed);
    out.extend_from_slice(p.tail);
}

struct StreamHeader {
    width: u32,
    columns: usize,
    rows: usize,
    raw_len: usize,
    /// Masks in the stream: 1 (version 1) or 2..=255 (version 2).
    clusters: usize,
}

fn parse(input: &[u8]) -> Result<StreamHeader> {
    // Version 2 (clusters) or 1; anything else is refused as version 1 would be.
    let version = if input.get(4) == Some(&2) { 2 } else { 1 };
    let h = stream_header(input, HEADER, MAGIC, version, "IBP")?;
    let width = h[5] as u32;
    let clusters = match (version, h[6]) {
        (1, 0) => 1,
        (2, c) if c >= 2 => c as usize,
        _ => return Err(Error::corrupt_at("bad cluster count", 6)),
    };
    if !matches!(width, 16 | 32 | 64) || h[7] != 0 {
        return Err(Error::corrupt_at("bad chunk width or reserved bytes", 5));
    }
    let field = |i: usize| usize::try_from(u64::from_le_bytes(h[i..i + 8].try_into().unwrap()));
    let (columns, rows, raw_len) = match (field(8), field(16), field(24)) {
        (Ok(c), Ok(r), Ok(l)) => (c, r, l),
        _ => return Err(Error::corrupt_at("sizes do not fit in memory", 8)),
    };
    let row_bytes = columns.checked_mul((width / 8) as usize);
    let body = match (row_bytes, row_bytes.and_then(|rb| rb.checked_mul(rows))) {
        (Some(rb), Some(body))
            if rb <= raw_len && body <= raw_len && (rows == 0 || columns > 0) =>
        {
            body
        }
        _ => {
            return Err(Error::corrupt_at(
                "rows x columns do not fit in the raw length",
                8,
            ))
        }
    };
    // Everything below is sized from these fields, so the bytes they claim must be in the
    // stream before anything is sized from them: every cluster's mask and bitval (2 V B bytes
    // each) and the tail bytes (raw length minus the rows' bytes), with checked arithmetic (a
    // column count near 2^60 once wrapped the mask size to zero).
    let stored = row_bytes
        .and_then(|rb| rb.checked_mul(2 * clusters))
        .and_then(|meta| meta.checked_add(raw_len - body))
        .and_then(|n| n.checked_add(HEADER));
    if stored.is_none_or(|n| n > input.len()) {
        return Err(Error::corrupt_at(
            "masks and tail bytes claimed by the header are not in the stream",
            8,
        ));
    }
    Ok(StreamHeader {
        width,
        columns,
        rows,
        raw_len,
        clusters,
    })
}

/// Everything of a stream before its rows, checked.
struct StreamMeta {
    header: StreamHeader,
    /// One per cluster.
    masks: Vec<Mask>,
    /// Every row's cluster; empty with one mask.
    row_cluster: Vec<u8>,
    bitmask: Vec<u32>,
    rows_offset: usize,
}

impl StreamMeta {
    fn columns(&self) -> Vec<Columns> {
        self.masks.iter().map(Columns::new).collect()
    }
}

fn read_meta(compressed: &[u8]) -> Result<StreamMeta> {
    let h = parse(compressed)?;
    let b = (h.width / 8) as usize;
    let mut pos = HEADER;
    // At most 255 x (mask and bitval): the bytes must be there before anything is allocated.
    let mask_bytes = 2 * h.columns * b;
    let meta = take(
        compressed,
        pos,
        h.clusters * mask_bytes,
        "IBP masks and bitvals",
    )?;
    let mut masks = Vec::with_capacity(h.clusters);
    for one in meta.chunks_exact(mask_bytes.max(1)).take(h.clusters) {
        let word = |i: usize| row::le_word(&one[i * b..i * b + b]);
        let mask = Mask {
            width: h.width,
            mask: (0..h.columns).map(word).collect(),
            bitval: (h.columns..2 * h.columns).map(word).collect(),
        };
        if mask.mask.iter().zip(&mask.bitval).any(|(m, v)| v & !m != 0) {
            return Err(Error::corrupt("bitval has bits outside the mask"));
        }
        masks.push(mask);
    }
    // Columns of zero chunks (no rows, the whole tensor in the tail): every cluster's empty.
    masks.resize(h.clusters, Mask::empty(h.width, h.columns));
    pos += meta.len();
    // Every stored row takes at least one byte: a row count beyond the bytes left is a lie
    // (checked before allocating for the rows).
    if h.rows > compressed.len() - pos {
        return Err(Error::corrupt("more rows than bytes left in the stream"));
    }
    let row_cluster = if h.clusters > 1 {
        let len = cluster::ids_bytes(h.rows, h.clusters)
            .ok_or_else(|| Error::corrupt("cluster ids do not fit in memory"))?;
        let ids = take(compressed, pos, len, "IBP cluster ids")?;
        pos += len;
        cluster::unpack_ids(ids, h.rows, h.clusters).map_err(|e| Error::corrupt_at(e, pos))?
    } else {
        vec![]
    };
    let bm = take(compressed, pos, h.rows.div_ceil(32) * 4, "IBP row bitmask")?;
    let bitmask: Vec<u32> = bm
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    if h.rows % 32 != 0 && bitmask.last().is_some_and(|w| w >> (h.rows % 32) != 0) {
        return Err(Error::corrupt("row bitmask has bits set past the last row"));
    }
    pos += bm.len();
    Ok(StreamMeta {
        header: h,
        masks,
        row_cluster,
        bitmask,
        rows_offset: pos,
    })
}

/// Where everything of an `Ibp` stream is, for decoders that work on many rows at once (the
/// GPU): the stream stores condensed rows without offsets, so they are found here by reading
/// each row's participation bitmap (no decoding), with every structural check of the CPU
/// decoder.
#[derive(Debug, Clone)]
pub struct StreamLayout {
    /// Chunk width `W`.
    pub width: u32,
    /// Chunks per row `V`.
    pub columns: usize,
    pub rows: usize,
    pub raw_len: usize,
    /// One mask per cluster (one for a version-1 stream).
    pub masks: Vec<Mask>,
    /// Every row's cluster (an index into `masks`); empty for a version-1 stream.
    pub row_cluster: Vec<u8>,
    /// Byte offset of cluster 0's mask words (its bitval words follow, then cluster 1's mask
    /// words, and so on: `2 V B` bytes per cluster).
    pub mask_offset: usize,
    /// Byte offset of the row bitmask (`ceil(N/32)` u32 words).
    pub bitmask_offset: usize,
    pub bitmask: Vec<u32>,
    /// `rows + 1` byte offsets: row `i` is stored at `row_offsets[i] .. row_offsets[i + 1]`.
    pub row_offsets: Vec<usize>,
    /// Byte offset of the tail bytes (`raw_len - rows * V * B` of them, to the end).
    pub tail_offset: usize,
}

impl StreamLayout {
    /// Row `i`'s cluster (0 in a version-1 stream).
    pub fn cluster(&self, i: usize) -> usize {
        cluster::cluster_of(&self.row_cluster, i)
    }
}

/// Parse and check an `Ibp` stream's layout.
pub fn stream_layout(compressed: &[u8]) -> Result<StreamLayout> {
    let m = read_meta(compressed)?;
    let (row_offsets, tail_offset) = place_rows(compressed, &m, &m.columns())?;
    Ok(StreamLayout {
        width: m.header.width,
        columns: m.header.columns,
        rows: m.header.rows,
        raw_len: m.header.raw_len,
        mask_offset: HEADER,
        bitmask_offset: m.rows_offset - m.header.rows.div_ceil(32) * 4,
        masks: m.masks,
        row_cluster: m.row_cluster,
        bitmask: m.bitmask,
        row_offsets,
        tail_offset,
    })
}

/// Every row's byte offset (`rows + 1` of them) and the tail's, from the rows' bitmaps alone,
/// with the structural checks of the decoder; the tail must end the stream. `cols` has one
/// entry per cluster.
fn place_rows(compressed: &[u8], m: &StreamMeta, cols: &[Columns]) -> Result<(Vec<usize>, usize)> {
    let mut row_offsets = Vec::with_capacity(m.header.rows + 1);
    let mut pos = m.rows_offset;
    row_offsets.push(pos);
    for i in 0..m.header.rows {
        let packed = m.bitmask[i / 32] >> (i % 32) & 1 == 1;
        let c = &cols[cluster::cluster_of(&m.row_cluster, i)];
        pos += row::stored_len(&compressed[pos..], packed, c)
            .map_err(|e| Error::corrupt_at(format!("row {i}: {e}"), pos))?;
        row_offsets.push(pos);
    }
    let row_bytes = m.header.columns * (m.header.width / 8) as usize;
    let tail = m.header.raw_len - m.header.rows * row_bytes;
    take(compressed, pos, tail, "IBP tail bytes")?;
    if pos + tail != compressed.len() {
        return Err(Error::TrailingBytes {
            extra: compressed.len() - pos - tail,
        });
    }
    Ok((row_offsets, pos))
}

impl Codec for Ibp {
    fn name(&self) -> String {
        let base = match (self.width, self.threshold) {
            (None, Threshold::Sweep) => "ibp".into(),
            (Some(w), Threshold::Sweep) => format!("ibp-w{w}"),
            (None, Threshold::Fixed(t)) => format!("ibp-t{t}"),
            (Some(w), Threshold::Fixed(t)) => format!("ibp-w{w}-t{t}"),
        };
        match self.clusters {
            0 | 1 => base,
            c => format!("{base}-clusters-{c}"),
        }
    }

    fn max_compressed_len(&self, raw_len: usize, _: ElemType) -> usize {
        // Header, mask and bitval (at most 2 x the row), bitmask, rows stored raw at worst.
        HEADER
            + raw_len
            + 2 * self.default_row_bytes.max(raw_len.min(1 << 20))
            + raw_len.div_ceil(32 * 2) * 4
    }

    fn encode(&self, input: &[u8], _: ElemType, out: &mut Vec<u8>) -> Result<()> {
        self.encode_rows(input, self.default_row_bytes, out)
            .map(|_| ())
    }

    fn encode_shaped(
        &self,
        input: &[u8],
        elem: ElemType,
        shape: &[usize],
        out: &mut Vec<u8>,
    ) -> Result<()> {
        self.encode_rows(input, shaped_row_bytes(input.len(), elem, shape), out)
            .map(|_| ())
    }

    fn decoded_len(&self, compressed: &[u8]) -> Result<usize> {
        parse(compressed).map(|h| h.raw_len)
    }

    fn decode(&self, compressed: &[u8], out: &mut [u8]) -> Result<()> {
        let m = read_meta(compressed)?;
        check_output_len(m.header.raw_len, out)?;
        let all_cols = m.columns();
        if all_cols.len() > 1 {
            return decode_clustered(compressed, &m, &all_cols, out);
        }
        let cols = &all_cols[0];
        let body = m.header.rows * cols.row_bytes();
        if wide::pays(cols, m.header.rows) {
            // Rows placed first (from their bitmaps), so that the group decoder can take
            // packed rows several at a time.
            let (row_offsets, tail_offset) = place_rows(compressed, &m, &all_cols)?;
            let placed = StreamRows {
                data: compressed,
                row_offsets: &row_offsets,
                bitmask: &m.bitmask,
            };
            layout::decode_rows(&placed, cols, 0..m.header.rows, &mut out[..body])?;
            out[body..].copy_from_slice(&compressed[tail_offset..]);
            return Ok(());
        }
        // One row after the other, each found where the last one ended.
        let mut pos = m.rows_offset;
        for (i, dst) in out[..body]
            .chunks_exact_mut(cols.row_bytes().max(1))
            .enumerate()
        {
            let packed = m.bitmask[i / 32] >> (i % 32) & 1 == 1;
            let used = row::decode_row(&compressed[pos..], packed, cols, dst)
                .map_err(|e| Error::corrupt_at(format!("row {i}: {e}"), pos))?;
            pos += used;
        }
        let tail = take(compressed, pos, m.header.raw_len - body, "IBP tail bytes")?;
        out[body..].copy_from_slice(tail);
        pos += tail.len();
        if pos != compressed.len() {
            return Err(Error::TrailingBytes {
                extra: compressed.len() - pos,
            });
        }
        Ok(())
    }
}

/// A stream with clusters: rows placed first, then each cluster's rows decoded together by the
/// group decoder with that cluster's columns (so the AVX2 lockstep path takes them several at
/// a time) into scratch, and copied to their places.
fn decode_clustered(
    compressed: &[u8],
    m: &StreamMeta,
    cols: &[Columns],
    out: &mut [u8],
) -> Result<()> {
    let rb = cols[0].row_bytes();
    let body = m.header.rows * rb;
    let (row_offsets, tail_offset) = place_rows(compressed, m, cols)?;
    let placed = StreamRows {
        data: compressed,
        row_offsets: &row_offsets,
        bitmask: &m.bitmask,
    };
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); cols.len()];
    for (i, &k) in m.row_cluster.iter().enumerate() {
        members[k as usize].push(i);
    }
    let mut scratch = Vec::new();
    for (k, rows) in members.iter().enumerate() {
        scratch.resize(rows.len() * rb, 0);
        layout::decode_rows(&placed, &cols[k], rows.iter().copied(), &mut scratch)?;
        for (&i, row) in rows.iter().zip(scratch.chunks_exact(rb.max(1))) {
            out[i * rb..(i + 1) * rb].copy_from_slice(row);
        }
    }
    out[body..].copy_from_slice(&compressed[tail_offset..]);
    Ok(())
}

/// The rows of an `Ibp` stream, placed by [`place_rows`], for the group decoder.
struct StreamRows<'a> {
    data: &'a [u8],
    row_offsets: &'a [usize],
    bitmask: &'a [u32],
}

impl layout::Placement for StreamRows<'_> {
    fn data(&self) -> &[u8] {
        self.data
    }
    fn start(&self, i: usize) -> usize {
        self.row_offsets[i]
    }
    fn span(&self, i: usize) -> Result<&[u8]> {
        Ok(&self.data[self.row_offsets[i]..self.row_offsets[i + 1]])
    }
    fn is_packed(&self, i: usize) -> bool {
        self.bitmask[i / 32] >> (i % 32) & 1 == 1
    }
    fn exact(&self) -> bool {
        true
    }
}
