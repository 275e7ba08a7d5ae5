//! A discrete-event simulator of one training step under a keep/swap/drop plan.
//!
//! Resources: the compute stream (ops in trace order, recomputations inserted before the
//! backward op that needs a dropped tensor), the device-to-host link and the host-to-device
//! link, each a FIFO server whose service time per tensor is equation (2) ([`crate::cost`]);
//! the codec engine is inside that cost, one per direction. Events follow from the order:
//!
//! * a swapped tensor joins the D2H queue when its producer ends; its memory is freed when the
//!   transfer ends or its last forward use ends, whichever is later;
//! * its H2D transfer is issued when compute reaches the plan's prefetch op, and starts when
//!   the link is free and the D2H copy is complete; memory is taken from the start;
//! * a backward op waits for every swapped tensor it needs (the wait is a *stall*) and first
//!   recomputes every dropped one on the compute stream. With op input edges in the trace, a
//!   recomputation is the whole chain (Checkmate, DTR): the producer, and before it every
//!   input op whose output is not resident at that moment (an unsaved intermediate, a tensor
//!   past its last backward use, a dropped tensor not yet recomputed), back to resident
//!   tensors; a swapped tensor a chain reads is waited for (its prefetch issued at once if it
//!   was not yet). A dropped tensor a chain regenerates is resident from then on; any other
//!   output of a recomputed op (an unsaved intermediate, a tensor past its last use) is held
//!   from its recomputation until the last op of the window's chains that reads it, and the
//!   largest sum of such outputs held at once is added to the window's memory (the trace's
//!   `output_bytes`; 0 where a trace does not record them). Without edges, the producer alone
//!   is charged, its inputs taken as resident;
//! * every tensor occupies memory from the start of its producer to the end of its last
//!   backward use, except while swapped out or dropped;
//! * with a memory budget in the plan, a forward op that would start over it, counting the
//!   swapped tensors whose D2H copy is still in flight, waits for those copies to end until it
//!   fits (a *stall*, as an allocator waits for offloads to release memory; if it cannot fit
//!   however long it waits, it does not wait). H2D prefetches are not held back this way.
//!
//! Memory is accounted per op window (from the end of the previous op, or of a forward op's
//! wait for memory, to the end of this one, backward stalls and recomputation included); a
//! tensor resident at any moment of a window counts for the whole window, which is the
//! conservative reading of a budget.

use crate::trace::{Phase, Trace};
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Keep,
    Swap,
    Drop,
}

/// Decisions per activation and, for swapped ones, the op at whose start the prefetch is issued.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub decisions: Vec<Decision>,
    pub prefetch_at: Vec<usize>,
    /// The memory the runtime may use (the budget the plan was made for): a forward op whose
    /// window would exceed it waits for offloads in flight to free memory, as an allocator
    /// must (a stall). `None`: never waits (memory is only measured).
    pub memory_budget: Option<u64>,
}

/// A trace with its op times and per-activation transfer times (each direction).
#[derive(Debug, Clone)]
pub struct Setup<'a> {
    pub trace: &'a Trace,
    pub op_seconds: Vec<f64>,
    pub d2h_seconds: Vec<f64>,
    pub h2d_seconds: Vec<f64>,
    /// A recomputation costs this many times its producer op.
    pub recompute_factor: f64,
}

impl<'a> Setup<'a> {
    /// Op times from `platform`; transfers by equation (2) with `ratios` (1.0 = uncompressed).
    pub fn new(trace: &'a Trace, platform: &crate::Platform, ratios: &[f64]) -> Setup<'a> {
        Setup::with_assumptions(trace, platform, ratios, &crate::Assumptions::default())
    }

    /// [`Setup::new`] under other assumptions of the time model.
    pub fn with_assumptions(
        trace: &'a Trace,
        platform: &crate::Platform,
        ratios: &[f64],
        a: &crate::Assumptions,
    ) -> Setup<'a> {
        let engine = if a.shared_engine {
            platform.engine_gbps / 2.0
        } else {
            platform.engine_gbps
        };
        let x: Vec<f64> = trace
            .activations
            .iter()
            .zip(ratios)
            .map(|(act, &c)| {
                crate::cost::transfer_seconds(act.bytes, c, platform.pcie_gbps, engine)
            })
            .collect();
        Setup {
            trace,
            op_seconds: platform.op_times_with(trace, a),
            d2h_seconds: x.clone(),
            h2d_seconds: x,
            recompute_factor: a.recompute_factor,
        }
    }

    pub fn ideal_seconds(&self) -> f64 {
        self.op_seconds.iter().sum()
    }
}

/// What one simulated step did.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub step_seconds: f64,
    /// All ops back to back with unlimited memory.
    pub ideal_seconds: f64,
    pub stall_seconds: f64,
    pub recompute_seconds: f64,
    /// (step - ideal) / ideal.
    pub overhead: f64,
    pub peak_bytes: u64,
    /// The most bytes of transient recomputation outputs held in one window (included in
    /// `memory_per_op` and `peak_bytes`).
    pub peak_transient_bytes: u64,
    #[serde(skip)]
    pub memory_per_op: Vec<u64>,
    /// Per activation: resident intervals (seconds).
    #[serde(skip)]
    pub resident: Vec<[(f64, f64); 2]>,
    /// Per activation: H2D end (swapped) and start of its first backward use.
    #[serde(skip)]
    pub h2d_end: Vec<f64>,
    #[serde(skip)]
    pub first_use_start: Vec<f64>,
    /// Op windows' start and end times.
    #[serde(skip)]
    pub window_start: Vec<f64>,
    #[serde(skip)]
    pub op_end: Vec<f64>,
    /// Of `stall_seconds`, the forward ops' waits for memory held by D2H copies in flight.
    pub memory_wait_seconds: f64,
    pub swapped_bytes: u64,
    pub dropped_bytes: u64,
}

impl Outcome {
    /// Sum over op windows of the bytes above `budget`.
    pub fn excess(&self, budget: u64) -> u128 {
        self.memory_per_op
            .iter()
            .map(|&m| m.saturating_sub(budget) as u128)
            .sum()
    }

    /// Does activation `a`'s residency overlap op window `k`?
    pub fn resident_during(&self, a: usize, k: usize) -> bool {
        let lo = self.window_start[k];
        let hi = self.op_end[k];
        self.resident[a]
            .iter()
            .any(|&(s, e)| e > s && s < hi && e > lo)
    }
}

/// Where the output of forward op `u` stands when a recomputation at backward op `k` reads it.
enum InputState {
    Resident,
    /// Swapped out: wait for activation `j` to come back.
    Swapped(usize),
    /// Must be recomputed.
    Missing,
}

fn input_state(
    t: &Trace,
    plan: &Plan,
    made_by: &[Vec<usize>],
    regenerated: &[bool],
    recomputed_in: &[usize],
    u: usize,
    k: usize,
) -> InputState {
    if recomputed_in[u] == k {
        return InputState::Resident;
    }
    let mut swapped = None;
    for &j in &made_by[u] {
        if k > t.activations[j].last_backward_use {
            continue; // freed
        }
        match plan.decisions[j] {
            Decision::Keep => return InputState::Resident,
            Decision::Drop if regenerated[j] => return InputState::Resident,
            Decision::Swap => swapped = Some(j),
            Decision::Drop => {}
        }
    }
    swapped.map_or(InputState::Missing, InputState::Swapped)
}

/// The most bytes that `chain` (ops recomputed in one window, in order, each with the bytes of
/// its outputs that are not regenerated activations) holds at once: an output is held from its
/// op until the last op of the chain that reads it (or its own op, if none does).
fn transient_peak(t: &Trace, chain: &[(usize, u64)]) -> u64 {
    let mut diff = vec![0i128; chain.len() + 1];
    for (p, &(q, bytes)) in chain.iter().enumerate() {
        if bytes == 0 {
            continue;
        }
        let last = (p..chain.len())
            .rev()
            .find(|&r| t.ops[chain[r].0].inputs.binary_search(&q).is_ok())
            .unwrap_or(p);
        diff[p] += bytes as i128;
        diff[last + 1] -= bytes as i128;
    }
    let (mut cur, mut peak) = (0i128, 0i128);
    for d in &diff {
        cur += d;
        peak = peak.max(cur);
    }
    peak as u64
}

/// Simulate one step.
pub fn simulate(setup: &Setup, plan: &Plan) -> Outcome {
    let t = setup.trace;
    let (n, na) = (t.ops.len(), t.activations.len());
    let mut produced_swaps: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut prefetches: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut needs: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, a) in t.activations.iter().enumerate() {
        match plan.decisions[i] {
            Decision::Keep => {}
            Decision::Swap => {
                produced_swaps[a.producer].push(i);
                // Never before the producer has run; never after the use.
                let at = plan.prefetch_at[i].clamp(a.producer + 1, a.first_backward_use);
                prefetches[at].push(i);
                needs[a.first_backward_use].push(i);
            }
            Decision::Drop => needs[a.first_backward_use].push(i),
        }
    }
    for p in &mut prefetches {
        p.sort_by_key(|&i| (t.activations[i].first_backward_use, i));
    }
    let (mut d2h_end, mut h2d_start, mut h2d_end) = (vec![0.0; na], vec![0.0; na], vec![0.0; na]);
    let mut h2d_issued = vec![false; na];
    let mut recompute_start = vec![0.0; na];
    // Dropped activations already regenerated (resident until their last backward use).
    let mut regenerated = vec![false; na];
    // The backward op during whose preamble an op was last recomputed (usize::MAX: never).
    let mut recomputed_in = vec![usize::MAX; n];
    let mut made_by: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, a) in t.activations.iter().enumerate() {
        made_by[a.producer].push(i);
    }
    let (mut start, mut end) = (vec![0.0; n], vec![0.0; n]);
    let mut window_start = vec![0.0; n];
    // For the memory wait: bytes surely resident during forward op k (kept tensors, tensors
    // not past their last forward use, op k's outputs), and per op the swapped tensors whose
    // last forward use ended just before it (from then on only their D2H copy holds them).
    let mut sure = vec![0i128; n + 1];
    let mut released_at: Vec<Vec<usize>> = vec![Vec::new(); n + 1];
    for (i, a) in t.activations.iter().enumerate() {
        let until = match plan.decisions[i] {
            Decision::Keep => n,
            _ => a.last_forward_use + 1,
        };
        sure[a.producer] += a.bytes as i128;
        sure[until] -= a.bytes as i128;
        if plan.decisions[i] == Decision::Swap {
            released_at[a.last_forward_use + 1].push(i);
        }
    }
    let mut sure_now = 0i128;
    let mut in_flight: Vec<usize> = Vec::new();
    let mut memory_wait = 0.0;
    let (mut now, mut d2h_free, mut h2d_free) = (0.0f64, 0.0f64, 0.0f64);
    let (mut stall, mut recompute) = (0.0, 0.0);
    // Per window: the most bytes of transient recomputation outputs held at once.
    let mut transient = vec![0u64; n];
    for k in 0..n {
        let mut s = now;
        sure_now += sure[k];
        if t.ops[k].phase == Phase::Forward {
            in_flight.extend_from_slice(&released_at[k]);
            in_flight.retain(|&i| d2h_end[i] > s);
            if let Some(budget) = plan.memory_budget {
                let mut need = sure_now
                    + in_flight
                        .iter()
                        .map(|&i| t.activations[i].bytes as i128)
                        .sum::<i128>();
                if need > budget as i128 && sure_now <= budget as i128 {
                    // Wait for the copies in the order they end until the op fits.
                    in_flight.sort_by(|&x, &y| d2h_end[x].total_cmp(&d2h_end[y]));
                    let mut done = 0;
                    while need > budget as i128 {
                        let i = in_flight[done];
                        need -= t.activations[i].bytes as i128;
                        s = s.max(d2h_end[i]);
                        done += 1;
                    }
                    in_flight.drain(..done);
                    memory_wait += s - now;
                    stall += s - now;
                }
            }
        }
        window_start[k] = s;
        for &i in &prefetches[k] {
            if h2d_issued[i] {
                continue; // a recomputation chain needed it earlier
            }
            let st = s.max(h2d_free).max(d2h_end[i]);
            h2d_start[i] = st;
            h2d_end[i] = st + setup.h2d_seconds[i];
            h2d_free = h2d_end[i];
            h2d_issued[i] = true;
        }
        if t.ops[k].phase == Phase::Backward {
            for &i in &needs[k] {
                if plan.decisions[i] == Decision::Swap && h2d_end[i] > s {
                    stall += h2d_end[i] - s;
                    s = h2d_end[i];
                }
            }
            // Ops recomputed in this window in order, each with the bytes it holds transiently.
            let mut chain: Vec<(usize, u64)> = Vec::new();
            for &i in &needs[k] {
                if plan.decisions[i] != Decision::Drop || regenerated[i] {
                    continue;
                }
                // Post-order walk of the chain: an op runs after every input it is missing.
                let mut stack = vec![(t.activations[i].producer, false)];
                while let Some((q, expanded)) = stack.pop() {
                    if recomputed_in[q] == k {
                        continue;
                    }
                    if !expanded {
                        stack.push((q, true));
                        for &u in &t.ops[q].inputs {
                            match input_state(t, plan, &made_by, &regenerated, &recomputed_in, u, k)
                            {
                                InputState::Resident => {}
                                InputState::Missing => stack.push((u, false)),
                                InputState::Swapped(j) => {
                                    if !h2d_issued[j] {
                                        let st = s.max(h2d_free).max(d2h_end[j]);
                                        h2d_start[j] = st;
                                        h2d_end[j] = st + setup.h2d_seconds[j];
                                        h2d_free = h2d_end[j];
                                        h2d_issued[j] = true;
                                    }
                                    if h2d_end[j] > s {
                                        stall += h2d_end[j] - s;
                                        s = h2d_end[j];
                                    }
                                }
                            }
                        }
                        continue;
                    }
                    let mut kept = 0u64;
                    for &j in &made_by[q] {
                        if plan.decisions[j] == Decision::Drop && !regenerated[j] {
                            regenerated[j] = true;
                            recompute_start[j] = s;
                            kept += t.activations[j].bytes;
                        }
                    }
                    chain.push((q, t.ops[q].output_bytes.saturating_sub(kept)));
                    let r = setup.op_seconds[q] * setup.recompute_factor;
                    s += r;
                    recompute += r;
                    recomputed_in[q] = k;
                }
            }
            transient[k] = transient_peak(t, &chain);
        }
        start[k] = s;
        end[k] = s + setup.op_seconds[k];
        now = end[k];
        for &i in &produced_swaps[k] {
            let st = end[k].max(d2h_free);
            d2h_end[i] = st + setup.d2h_seconds[i];
            d2h_free = d2h_end[i];
        }
    }

    let mut resident = Vec::with_capacity(na);
    let mut first_use_start = Vec::with_capacity(na);
    let (mut swapped_bytes, mut dropped_bytes) = (0, 0);
    for (i, a) in t.activations.iter().enumerate() {
        let born = start[a.producer];
        let gone = end[a.last_backward_use];
        first_use_start.push(start[a.first_backward_use]);
        resident.push(match plan.decisions[i] {
            Decision::Keep => [(born, gone), (0.0, 0.0)],
            Decision::Swap => {
                swapped_bytes += a.bytes;
                [
                    (born, d2h_end[i].max(end[a.last_forward_use])),
                    (h2d_start[i], gone),
                ]
            }
            Decision::Drop => {
                dropped_bytes += a.bytes;
                [(born, end[a.last_forward_use]), (recompute_start[i], gone)]
            }
        });
    }
    // Memory per op window via a difference array over window indices.
    let mut diff = vec![0i128; n + 1];
    for (i, a) in t.activations.iter().enumerate() {
        for &(s, e) in &resident[i] {
            if e <= s {
                continue;
            }
            // First window whose end is after s; last window whose start is before e.
            let k1 = end.partition_point(|&x| x <= s);
            let k2 = window_start.partition_point(|&x| x < e);
            if k2 == 0 {
                continue;
            }
            let k2 = (k2 - 1).min(n - 1);
            if k1 <= k2 {
                diff[k1] += a.bytes as i128;
                diff[k2 + 1] -= a.bytes as i128;
            }
        }
    }
    let mut memory_per_op = Vec::with_capacity(n);
    let mut cur = 0i128;
    for (d, extra) in diff.iter().zip(&transient) {
        cur += d;
        memory_per_op.push(cur as u64 + extra);
    }
    let ideal = setup.ideal_seconds();
    let step = now;
    Outcome {
        step_seconds: step,
        ideal_seconds: ideal,
        stall_seconds: stall,
        recompute_seconds: recompute,
        overhead: (step - ideal) / ideal,
        peak_bytes: memory_per_op.iter().copied().max().unwrap_or(0),
        peak_transient_bytes: transient.iter().copied().max().unwrap_or(0),
        memory_per_op,
        resident,
        h2d_end,
        first_use_start,
        window_start,
        op_end: end,
        memory_wait_seconds: memory_wait,
        swapped_bytes,
        dropped_bytes,
    }
}
