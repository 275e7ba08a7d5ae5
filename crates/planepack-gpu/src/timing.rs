//! Timing kernels: GPU timestamp queries where the adapter has them, wall clock otherwise.

use crate::{Gpu, Prepared};

/// Wall-clock seconds of each run of a pipelined transfer ([`Gpu::time_pipelined`]).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Pipelined {
    /// Upload of every compressed stream, each decoded into device memory as soon as it is up.
    pub compressed: Vec<f64>,
    /// Upload of every raw tensor.
    pub raw: Vec<f64>,
}

use std::time::Instant;

/// Per-run seconds of one kernel, and how they were measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Timing {
    pub seconds: Vec<f64>,
    pub timestamps: bool,
}

impl Timing {
    pub fn median(&self) -> f64 {
        planepack_core::stats::median(&self.seconds)
    }
}

impl Gpu {
    /// Run `p` `runs` times (after one warm-up) and time each run.
    pub fn time(&self, p: &Prepared, runs: usize) -> Timing {
        self.time_each(&[p], runs).remove(0)
    }

    /// Time several kernels `runs` times each, in turn (a, b, a, b, ...) after one warm-up
    /// each, so that their runs share the same stretch of time: a ratio of two kernels'
    /// medians then compares like with like on a device (or a CPU, for lavapipe) whose speed
    /// drifts.
    pub fn time_each(&self, ps: &[&Prepared], runs: usize) -> Vec<Timing> {
        let mut enc = self.device.create_command_encoder(&Default::default());
        for p in ps {
            self.record(p, &mut enc, None);
        }
        self.queue.submit([enc.finish()]);
        self.wait();
        let k = ps.len();
        if self.timestamps {
            let n = (runs * k) as u32;
            let qs = self.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: None,
                ty: wgpu::QueryType::Timestamp,
                count: 2 * n,
            });
            let mut enc = self.device.create_command_encoder(&Default::default());
            for i in 0..runs * k {
                self.record(ps[i % k], &mut enc, Some((&qs, 2 * i as u32)));
            }
            let size = 16 * n as u64;
            let resolve = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size,
                usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            });
            enc.resolve_query_set(&qs, 0..2 * n, &resolve, 0);
            self.queue.submit([enc.finish()]);
            let raw = self.read(&resolve, size as usize);
            let period = self.queue.get_timestamp_period() as f64 * 1e-9;
            let ticks: Vec<u64> = raw
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                .collect();
            let all: Vec<f64> = ticks
                .chunks_exact(2)
                .map(|t| t[1].saturating_sub(t[0]) as f64 * period)
                .collect();
            return (0..k)
                .map(|j| Timing {
                    seconds: all.iter().skip(j).step_by(k).copied().collect(),
                    timestamps: true,
                })
                .collect();
        }
        let mut seconds = vec![Vec::with_capacity(runs); k];
        for _ in 0..runs {
            for (p, s) in ps.iter().zip(&mut seconds) {
                let t = Instant::now();
                let mut enc = self.device.create_command_encoder(&Default::default());
                self.record(p, &mut enc, None);
                self.queue.submit([enc.finish()]);
                self.wait();
                s.push(t.elapsed().as_secs_f64());
            }
        }
        seconds
            .into_iter()
            .map(|seconds| Timing {
                seconds,
                timestamps: false,
            })
            .collect()
    }

    /// The return trip of an offload, measured as it runs: per run, upload `compressed` into
    /// the stream buffer of `p` (a decode prepared from those same bytes) and decode it into
    /// device memory, with no readback; against uploading `raw` into a device buffer. The two
    /// alternate, one warm-up each, wall clock from the first byte written to the device
    /// idle. Returns (seconds of each compressed-upload + decode, seconds of each raw upload).
    pub fn time_transfer(
        &self,
        p: &Prepared,
        compressed: &[u8],
        raw: &[u8],
        runs: usize,
    ) -> crate::Result<(Vec<f64>, Vec<f64>)> {
        let t = self.time_pipelined(&[(p, compressed, raw)], runs)?;
        Ok((t.compressed, t.raw))
    }

    /// The return trip of an offload for many tensors, pipelined as a transfer path would
    /// run it: per run, for each tensor in turn, write its compressed stream into the launch's
    /// stream buffer and submit its decode (into device memory, no readback) without waiting,
    /// so that the copy of tensor i+1 (through wgpu's staging buffers, several in flight)
    /// overlaps the decode of tensor i; one wait at the end. Against the same loop writing the
    /// raw tensors into device buffers. The two alternate run by run, one warm-up each. Each
    /// `(launch, compressed, raw)` must name the bytes its launch was prepared from. The host
    /// checks of the streams (done once, by the prepare calls) are not in the times.
    pub fn time_pipelined(
        &self,
        items: &[(&Prepared, &[u8], &[u8])],
        runs: usize,
    ) -> crate::Result<Pipelined> {
        let mut streams = Vec::with_capacity(items.len());
        let mut raws = Vec::with_capacity(items.len());
        for (p, compressed, raw) in items {
            let stream = crate::stream_padded(compressed);
            if stream.len() as u64 != p.input.size() {
                return Err(crate::GpuError::Unsupported(
                    "time_pipelined: bytes that are not the stream the launch was prepared from"
                        .into(),
                ));
            }
            streams.push(stream);
            let words = crate::words(raw);
            let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("raw upload"),
                size: words.len() as u64,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            raws.push((buf, words));
        }
        let mut out = Pipelined {
            compressed: Vec::new(),
            raw: Vec::new(),
        };
        for i in 0..=runs.max(1) {
            let t = Instant::now();
            for ((p, _, _), stream) in items.iter().zip(&streams) {
                self.queue.write_buffer(&p.input, 0, stream);
                let mut enc = self.device.create_command_encoder(&Default::default());
                self.record(p, &mut enc, None);
                self.queue.submit([enc.finish()]);
            }
            self.wait();
            let d = t.elapsed().as_secs_f64();
            let t = Instant::now();
            for (buf, words) in &raws {
                self.queue.write_buffer(buf, 0, words);
                self.queue.submit([]);
            }
            self.wait();
            let u = t.elapsed().as_secs_f64();
            if i > 0 {
                out.compressed.push(d);
                out.raw.push(u);
            }
        }
        Ok(out)
    }

    pub fn time_upload(&self, bytes: &[u8], runs: usize) -> f64 {
        let size = bytes.len().div_ceil(4).max(1) as u64 * 4;
        let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("upload"),
            size,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let data = crate::words(bytes);
        let mut v: Vec<f64> = (0..runs.max(1) + 1)
            .map(|_| {
                let t = Instant::now();
                self.queue.write_buffer(&buf, 0, &data);
                self.queue.submit([]);
                self.wait();
                t.elapsed().as_secs_f64()
            })
            .skip(1)
            .collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    }
}
