//! A greedy keep/swap/drop planner under an activation-memory budget.
//!
//! Start with every activation kept. While the simulated peak is over the budget, look at the
//! op window with the most memory, take the largest activations resident there (not already
//! dropped), and try each move: keep → swap, keep → drop, swap → drop. Every move is simulated
//! in full; the winner is the one that costs the least step time per byte of excess removed
//! (excess = bytes over budget summed over op windows), so free swaps (hidden behind compute)
//! go first, then cheap recomputations, then swaps that stall. Compression enters through the
//! transfer times: cheaper transfers make more swaps free, and the planner picks them.
//! `Search::swap_first` orders the moves as swap-based systems do instead: offload while an
//! offload helps, recompute only after (a sensitivity row of `cargo xtask trace`).
//!
//! A plan carries its budget, and the simulated runtime holds a forward op back until the D2H
//! copies in flight have freed enough memory ([`crate::sim`]): a swap whose copy is slow then
//! still meets the budget, at the price of a stall that compression shortens. The greedy
//! search runs once with those waits and once without them, and keeps the better plan
//! ([`plan_with`]).
//!
//! Prefetches are scheduled as late as possible on the ideal timeline: going through the
//! swapped tensors from the last deadline back, each H2D must end before its first backward
//! use and before the next transfer in the queue starts; it is issued at the last op that
//! starts before that latest start (never before its last forward use ends).

use crate::sim::{simulate, Decision, Outcome, Plan, Setup};

/// How many of the largest resident activations to try per step: 64. With recomputation
/// chains, 32 left the mean overhead at 50 % 0.2 points above 128; the sensitivity table of
/// `bench-results/trace/paper.md` shows 8, 32, 128 and 256 beside this default.
pub const CANDIDATES: usize = 64;

/// How widely the planner searches, and the runtime it plans for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Search {
    /// How many of the largest resident activations to try per step.
    pub candidates: usize,
    /// Whether the plans' runtime waits for memory held by D2H copies in flight before a
    /// forward op (`Plan::memory_budget`); without it a swap frees memory only when its copy
    /// happens to end in time.
    pub wait_for_memory: bool,
    /// Offload first, as the swap-based systems do (vDNN swaps only; Capuchin recomputes only
    /// where a swap cannot be hidden): while some keep -> swap move brings the excess down,
    /// only those moves are weighed; drops come in when no swap helps any more. Off by
    /// default: the planner then weighs every move by its cost, and a recompute that is
    /// cheaper than a stall wins.
    pub swap_first: bool,
}

impl Default for Search {
    fn default() -> Search {
        Search {
            candidates: CANDIDATES,
            wait_for_memory: true,
            swap_first: false,
        }
    }
}

/// A plan and how it did.
#[derive(Debug, Clone)]
pub struct Planned {
    pub plan: Plan,
    pub outcome: Outcome,
    /// False when no move could bring the peak under the budget (the plan is the best found).
    pub feasible: bool,
    pub iterations: usize,
}

/// Latest-possible prefetch ops for the swapped activations of `decisions`.
pub fn schedule_prefetch(setup: &Setup, decisions: &[Decision]) -> Vec<usize> {
    let t = setup.trace;
    let mut ideal_start = Vec::with_capacity(t.ops.len());
    let mut now = 0.0;
    for &d in &setup.op_seconds {
        ideal_start.push(now);
        now += d;
    }
    let mut prefetch = vec![0usize; t.activations.len()];
    let mut swapped: Vec<usize> = (0..decisions.len())
        .filter(|&i| decisions[i] == Decision::Swap)
        .collect();
    swapped.sort_by_key(|&i| std::cmp::Reverse((t.activations[i].first_backward_use, i)));
    let mut next_start = f64::INFINITY;
    for i in swapped {
        let a = &t.activations[i];
        let latest_end = ideal_start[a.first_backward_use].min(next_start);
        let latest_start = latest_end - setup.h2d_seconds[i];
        next_start = latest_start;
        // Last op starting at or before latest_start.
        let k = ideal_start
            .partition_point(|&s| s <= latest_start)
            .saturating_sub(1);
        prefetch[i] = k.clamp(a.last_forward_use + 1, a.first_backward_use);
    }
    prefetch
}

fn plan_of(setup: &Setup, decisions: Vec<Decision>, budget: u64, search: Search) -> Plan {
    let prefetch_at = schedule_prefetch(setup, &decisions);
    Plan {
        decisions,
        prefetch_at,
        memory_budget: search.wait_for_memory.then_some(budget),
    }
}

/// Plan under `budget` bytes of activation memory.
pub fn plan(setup: &Setup, budget: u64) -> Planned {
    plan_with(setup, budget, Search::default())
}

/// [`plan`] with another search. Where the runtime waits for memory, the greedy search runs
/// twice: once weighing those waits (a swap then frees memory at the price of a stall), once
/// as if they did not exist (a swap frees memory only when its copy ends in time, so budgets
/// are met by recomputation and hidden swaps); both plans run on the waiting runtime and the
/// better one that meets the budget wins. A greedy choice that a wait makes look cheap can
/// lead the first search astray; the second keeps the result from being worse than a planner
/// that ignores waits (a plan that fits without waiting never waits). With
/// [`Search::swap_first`] only the first runs: a runtime that offloads first waits for its
/// copies, and the second search would put back the recomputations that policy avoids.
pub fn plan_with(setup: &Setup, budget: u64, search: Search) -> Planned {
    let waiting = greedy(setup, budget, search);
    if !search.wait_for_memory || search.swap_first {
        return waiting;
    }
    let blind = greedy(
        setup,
        budget,
        Search {
            wait_for_memory: false,
            ..search
        },
    );
    let iterations = waiting.iterations + blind.iterations;
    let plan = Plan {
        memory_budget: Some(budget),
        ..blind.plan
    };
    better_of(setup, budget, waiting, plan, iterations)
}

/// `best`, or `plan` run on `setup` where it does better: meeting the budget first, then the
/// shorter step.
fn better_of(setup: &Setup, budget: u64, best: Planned, plan: Plan, iterations: usize) -> Planned {
    let outcome = simulate(setup, &plan);
    let fits = outcome.peak_bytes <= budget;
    if (fits && !best.feasible)
        || (fits == best.feasible && outcome.step_seconds < best.outcome.step_seconds)
    {
        Planned {
            plan,
            outcome,
            feasible: fits,
            iterations,
        }
    } else {
        best
    }
}

/// One greedy search (see the module docs).
fn greedy(setup: &Setup, budget: u64, search: Search) -> Planned {
    let n = setup.trace.activations.len();
    let mut current = plan_of(setup, vec![Decision::Keep; n], budget, search);
    let mut out = simulate(setup, &current);
    let mut iterations = 0;
    loop {
        if out.peak_bytes <= budget {
            return Planned {
                plan: current,
                outcome: out,
                feasible: true,
                iterations,
            };
        }
        iterations += 1;
        let excess = out.excess(budget);
        let worst = (0..out.memory_per_op.len())
            .max_by_key(|&k| out.memory_per_op[k])
            .unwrap_or(0);
        let mut resident: Vec<usize> = (0..n)
            .filter(|&i| current.decisions[i] != Decision::Drop && out.resident_during(i, worst))
            .collect();
        resident.sort_by_key(|&i| std::cmp::Reverse(setup.trace.activations[i].bytes));
        resident.truncate(search.candidates.max(1));
        // The cheapest move per excess byte removed, ties to the one removing more; with
        // `swap_first`, any keep -> swap move ranks before every drop.
        let mut best: Option<(bool, f64, u128, Plan, Outcome)> = None;
        for i in resident {
            let moves: &[Decision] = match current.decisions[i] {
                Decision::Keep => &[Decision::Swap, Decision::Drop],
                Decision::Swap => &[Decision::Drop],
                Decision::Drop => &[],
            };
            for &m in moves {
                let mut d = current.decisions.clone();
                d[i] = m;
                let p = plan_of(setup, d, budget, search);
                let o = simulate(setup, &p);
                let e = o.excess(budget);
                if e >= excess {
                    continue;
                }
                let removed = excess - e;
                let cost = (o.step_seconds - out.step_seconds).max(0.0) / removed as f64;
                let deferred = search.swap_first && m != Decision::Swap;
                let better = match &best {
                    None => true,
                    Some((dd, c, r, _, _)) => {
                        (deferred, cost) < (*dd, *c)
                            || (deferred == *dd && cost == *c && removed > *r)
                    }
                };
                if better {
                    best = Some((deferred, cost, removed, p, o));
                }
            }
        }
        match best {
            Some((_, _, _, p, o)) => {
                current = p;
                out = o;
            }
            None => {
                return Planned {
                    plan: current,
                    outcome: out,
                    feasible: false,
                    iterations,
                }
            }
        }
    }
}

/// [`plan`], then also every plan in `others` re-simulated on `setup` (for example the plan
/// made without compression): the best that meets the budget wins. Greedy choices are not
/// optimal, and a planner that knows the compressed costs should never do worse than the
/// uncompressed plan with compressed transfers.
pub fn plan_best(setup: &Setup, budget: u64, others: &[&Plan]) -> Planned {
    plan_best_with(setup, budget, others, Search::default())
}

/// [`plan_best`] with another search.
pub fn plan_best_with(setup: &Setup, budget: u64, others: &[&Plan], search: Search) -> Planned {
    let mut best = plan_with(setup, budget, search);
    for p in others {
        let iterations = best.iterations;
        best = better_of(setup, budget, best, (*p).clone(), iterations);
    }
    best
}

/// The least activation memory any keep/swap/drop plan can have: during each op, the tensors
/// it produces or reads in the forward pass and those it needs in the backward pass must be
/// resident. A budget below this is infeasible for every planner.
pub fn memory_lower_bound(t: &crate::Trace) -> u64 {
    let n = t.ops.len();
    let mut diff = vec![0i128; n + 1];
    for a in &t.activations {
        for (s, e) in [
            (a.producer, a.last_forward_use),
            (a.first_backward_use, a.last_backward_use),
        ] {
            diff[s] += a.bytes as i128;
            diff[e + 1] -= a.bytes as i128;
        }
    }
    let mut cur = 0i128;
    let mut max = 0i128;
    for d in diff.iter().take(n) {
        cur += d;
        max = max.max(cur);
    }
    max as u64
}
