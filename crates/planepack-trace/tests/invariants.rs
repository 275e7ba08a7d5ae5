//! The simulator's and the planner's invariants, on the real model traces and on a trace small
//! enough to check by hand.

use planepack_trace::cost::transfer_seconds;
use planepack_trace::planner::{memory_lower_bound, plan, plan_best, plan_with, Search};
use planepack_trace::platform::A100_40GB;
use planepack_trace::sim::{simulate, Decision, Plan, Setup};
use planepack_trace::{Activation, Op, Phase, Trace};
use std::path::Path;

fn traces(dtype: &str) -> Vec<Trace> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../datasets/traces");
    let mut v: Vec<Trace> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_str().unwrap().ends_with(&format!("-{dtype}.json")))
        .map(|p| Trace::load(&p).unwrap())
        .collect();
    v.sort_by(|a, b| a.model.cmp(&b.model));
    assert_eq!(v.len(), 5, "five model traces per dtype");
    v
}

fn keep_all(t: &Trace) -> Plan {
    Plan {
        decisions: vec![Decision::Keep; t.activations.len()],
        prefetch_at: vec![0; t.activations.len()],
        memory_budget: None,
    }
}

/// A typical compression ratio for every activation.
fn ratios(t: &Trace, c: f64) -> Vec<f64> {
    vec![c; t.activations.len()]
}

#[test]
fn memory_never_exceeds_the_budget_and_time_adds_up() {
    for t in traces("bf16") {
        for c in [1.0, 1.6] {
            let setup = Setup::new(&t, &A100_40GB, &ratios(&t, c));
            let peak = simulate(&setup, &keep_all(&t)).peak_bytes;
            for f in [0.3, 0.5, 0.8] {
                let budget = (peak as f64 * f) as u64;
                let p = plan(&setup, budget);
                if budget >= memory_lower_bound(&t) {
                    assert!(p.feasible, "{} c={c} at {f}", t.model);
                } else {
                    assert!(
                        !p.feasible,
                        "{} c={c} at {f}: below the lower bound",
                        t.model
                    );
                    continue;
                }
                assert!(p.outcome.peak_bytes <= budget, "{} c={c} at {f}", t.model);
                // Step time = ideal + stalls + recomputation, nothing unaccounted.
                let o = &p.outcome;
                let sum = o.ideal_seconds + o.stall_seconds + o.recompute_seconds;
                assert!((o.step_seconds - sum).abs() <= 1e-9 * sum, "{}", t.model);
                // Every swapped tensor is back before its first backward use.
                for (i, d) in p.plan.decisions.iter().enumerate() {
                    if *d == Decision::Swap {
                        assert!(o.first_use_start[i] >= o.h2d_end[i], "{} act {i}", t.model);
                    }
                }
            }
        }
    }
}

#[test]
fn unlimited_memory_means_no_overhead() {
    for t in traces("fp32") {
        let setup = Setup::new(&t, &A100_40GB, &ratios(&t, 1.5));
        let p = plan(&setup, u64::MAX);
        assert!(p.plan.decisions.iter().all(|d| *d == Decision::Keep));
        assert_eq!(p.outcome.overhead, 0.0);
        assert_eq!(p.outcome.step_seconds, setup.ideal_seconds());
    }
}

#[test]
fn ratio_one_is_no_compression() {
    for t in traces("bf16") {
        let none = Setup::new(&t, &A100_40GB, &ratios(&t, 1.0));
        let peak = simulate(&none, &keep_all(&t)).peak_bytes;
        let a = plan(&none, peak / 2);
        // Ratios at or below 1 take the bypass: exactly the uncompressed costs.
        let expanding = Setup::new(&t, &A100_40GB, &ratios(&t, 0.9));
        assert_eq!(expanding.d2h_seconds, none.d2h_seconds);
        let b = plan(&expanding, peak / 2);
        assert_eq!(a.plan, b.plan);
        assert_eq!(a.outcome.step_seconds, b.outcome.step_seconds);
        // And a real ratio only helps the replanned step.
        let comp = Setup::new(&t, &A100_40GB, &ratios(&t, 1.7));
        let re = plan_best(&comp, peak / 2, &[&a.plan]);
        assert!(re.feasible);
        assert!(
            re.outcome.step_seconds <= a.outcome.step_seconds * (1.0 + 1e-12),
            "{}",
            t.model
        );
    }
}

#[test]
fn a_faster_link_never_makes_a_plan_slower() {
    for t in traces("bf16") {
        let base = Setup::new(&t, &A100_40GB.with_link(12.0), &ratios(&t, 1.0));
        let peak = simulate(&base, &keep_all(&t)).peak_bytes;
        let p = plan(&base, peak * 3 / 10).plan;
        assert!(
            p.decisions.contains(&Decision::Swap),
            "{}: the test needs swaps",
            t.model
        );
        let mut last = f64::INFINITY;
        for link in [4.0, 8.0, 12.0, 16.0, 24.0, 32.0, 64.0, 128.0] {
            for c in [1.0, 1.4, 2.0] {
                let s = Setup::new(&t, &A100_40GB.with_link(link), &ratios(&t, c));
                let step = simulate(&s, &p).step_seconds;
                if c == 1.0 {
                    assert!(step <= last * (1.0 + 1e-12), "{} at {link} GB/s", t.model);
                    last = step;
                }
            }
        }
    }
}

/// A 1 ms op reading the outputs of `inputs`.
fn ms_op(id: usize, phase: Phase, inputs: Vec<usize>) -> Op {
    Op {
        id,
        name: "mm".into(),
        phase,
        flops: 0,
        bytes: 0,
        seconds: Some(1e-3),
        inputs,
        output_bytes: 0,
    }
}

/// Two forward ops, two backward ops, one 24 MB activation: times by hand.
fn tiny() -> Trace {
    let op = |id, phase| ms_op(id, phase, vec![]);
    Trace {
        format: "planepack-trace/1".into(),
        model: "tiny".into(),
        description: String::new(),
        dtype: "bf16".into(),
        batch: 1,
        ops: vec![
            op(0, Phase::Forward),
            op(1, Phase::Forward),
            op(2, Phase::Backward),
            op(3, Phase::Backward),
        ],
        activations: vec![Activation {
            id: 0,
            bytes: 24_000_000,
            dtype: "bf16".into(),
            producer: 0,
            last_forward_use: 0,
            first_backward_use: 3,
            last_backward_use: 3,
            saved_by: "mm".into(),
        }],
    }
}

#[test]
fn hand_checked_swap_and_drop() {
    let t = tiny();
    t.validate().unwrap();
    // 24 MB over 24 GB/s = 1 ms each way.
    assert_eq!(transfer_seconds(24_000_000, 1.0, 24.0, 64.0), 1e-3);
    assert_eq!(transfer_seconds(24_000_000, 2.0, 24.0, 64.0), 0.5e-3);
    // Engine-bound: ratio 4 would give 0.25 ms on the link, the engine needs 0.375 ms.
    assert_eq!(transfer_seconds(24_000_000, 4.0, 24.0, 64.0), 0.375e-3);
    let setup = Setup::new(&t, &A100_40GB, &[1.0]);
    // The one activation's decision, its prefetch op and the runtime's memory budget.
    let run = |decision, prefetch, memory_budget| {
        simulate(
            &setup,
            &Plan {
                decisions: vec![decision],
                prefetch_at: vec![prefetch],
                memory_budget,
            },
        )
    };
    // Swap, prefetch issued at op 2: D2H 1-2 ms, H2D 2-3 ms, op 3 starts at 3 ms: no stall.
    let swap = run(Decision::Swap, 2, None);
    assert_eq!(swap.stall_seconds, 0.0);
    assert_eq!(swap.step_seconds, 4e-3);
    // Memory: op 0 and op 1 (the D2H ends with op 1), op 3; not op 2's window... except that
    // the H2D runs during op 2.
    assert_eq!(
        swap.memory_per_op,
        vec![24_000_000, 24_000_000, 24_000_000, 24_000_000]
    );
    // Prefetch issued only at op 3: a full 1 ms stall.
    let late = run(Decision::Swap, 3, None);
    assert!((late.stall_seconds - 1e-3).abs() < 1e-15);
    assert!((late.step_seconds - 5e-3).abs() < 1e-15);
    // The same swap under a budget of 0 bytes: op 1 would start while the D2H copy still
    // holds the 24 MB, so it waits for the copy (1-2 ms: a 1 ms stall) and its window is
    // empty; everything after moves 1 ms later.
    let wait = run(Decision::Swap, 2, Some(0));
    assert!((wait.memory_wait_seconds - 1e-3).abs() < 1e-15);
    assert!((wait.stall_seconds - 1e-3).abs() < 1e-15);
    assert!((wait.step_seconds - 5e-3).abs() < 1e-15);
    assert_eq!(
        wait.memory_per_op,
        vec![24_000_000, 0, 24_000_000, 24_000_000]
    );
    // A budget the op fits in without waiting changes nothing.
    let roomy = run(Decision::Swap, 2, Some(24_000_000));
    assert_eq!(roomy.memory_wait_seconds, 0.0);
    assert_eq!(roomy.step_seconds, swap.step_seconds);
    // Drop: recompute op 0 (1 ms) before op 3; free during ops 1 and 2.
    let drop = run(Decision::Drop, 0, None);
    assert_eq!(drop.recompute_seconds, 1e-3);
    assert_eq!(drop.memory_per_op, vec![24_000_000, 0, 0, 24_000_000]);
    // The planner, with room for nothing at ops 1-2, picks the free swap... which here is not
    // free of memory (the transfers overlap ops 1 and 2), so it must drop.
    let p = plan(&setup, 0);
    assert!(!p.feasible, "a budget of 0 cannot hold op 0's output");
    let p = plan(&setup, 23_999_999);
    assert!(!p.feasible);
}

/// A BF16 activation of `bytes` saved by an `mm` from its producer op to one backward op.
fn saved(
    id: usize,
    bytes: u64,
    producer: usize,
    last_forward_use: usize,
    backward: usize,
) -> Activation {
    Activation {
        id,
        bytes,
        dtype: "bf16".into(),
        producer,
        last_forward_use,
        first_backward_use: backward,
        last_backward_use: backward,
        saved_by: "mm".into(),
    }
}

/// Four forward ops in a chain (0 -> 1 -> 2 -> 3) and three backward ops, 1 ms each. Op 0's
/// output `a0` is saved until backward op 6, op 2's output `a1` until backward op 4; op 1's
/// output (10 MB) is an unsaved intermediate. With the input edges a recomputation is the chain
/// back to resident tensors; without them, the producer alone.
fn chain() -> Trace {
    let op = ms_op;
    let act = |id, producer, last_forward_use, backward| {
        saved(id, 24_000_000, producer, last_forward_use, backward)
    };
    let mut t = Trace {
        format: "planepack-trace/1".into(),
        model: "chain".into(),
        description: String::new(),
        dtype: "bf16".into(),
        batch: 1,
        ops: vec![
            op(0, Phase::Forward, vec![]),
            op(1, Phase::Forward, vec![0]),
            op(2, Phase::Forward, vec![1]),
            op(3, Phase::Forward, vec![2]),
            op(4, Phase::Backward, vec![]),
            op(5, Phase::Backward, vec![]),
            op(6, Phase::Backward, vec![]),
        ],
        activations: vec![act(0, 0, 1, 6), act(1, 2, 3, 4)],
    };
    for (op, bytes) in t.ops.iter_mut().zip([24_000_000, 10_000_000, 24_000_000]) {
        op.output_bytes = bytes;
    }
    t
}

#[test]
fn recomputation_follows_input_edges_back_to_resident_tensors() {
    let t = chain();
    t.validate().unwrap();
    assert!(t.has_edges());
    let setup = Setup::new(&t, &A100_40GB, &[1.0, 1.0]);
    let run = |d: [Decision; 2], prefetch: [usize; 2]| {
        simulate(
            &setup,
            &Plan {
                decisions: d.to_vec(),
                prefetch_at: prefetch.to_vec(),
                memory_budget: None,
            },
        )
    };
    let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
    // a1 dropped, a0 kept: op 2 needs op 1's unsaved output, which needs a0 (resident): 2 ms.
    let o = run([Decision::Keep, Decision::Drop], [0, 0]);
    assert!(close(o.recompute_seconds, 2e-3), "{}", o.recompute_seconds);
    assert!(close(o.step_seconds, 9e-3));
    // Op 4's window holds a0, the regenerated a1 and, while op 2 recomputes, op 1's 10 MB.
    assert_eq!(o.peak_transient_bytes, 10_000_000);
    assert_eq!(o.memory_per_op[4], 58_000_000);
    assert_eq!(o.memory_per_op[5], 24_000_000, "the intermediate is gone");
    // Both dropped: the chain reaches op 0 (3 ms) and regenerates a0 on the way, which is
    // then resident until op 6 and not recomputed again.
    let o = run([Decision::Drop, Decision::Drop], [0, 0]);
    assert!(close(o.recompute_seconds, 3e-3), "{}", o.recompute_seconds);
    assert_eq!(o.memory_per_op[4], 58_000_000, "a0, a1 and op 1's output");
    assert_eq!(
        o.memory_per_op[5], 24_000_000,
        "a0 back since op 4's recomputation"
    );
    // a0 swapped (prefetch planned at op 5), a1 dropped: the chain needs a0 at op 4, so its
    // H2D is issued then (D2H ended at 2 ms; H2D 4-5 ms: a 1 ms stall), then 2 ms of
    // recomputation; the planned prefetch at op 5 finds it issued.
    let o = run([Decision::Swap, Decision::Drop], [5, 0]);
    assert!(close(o.stall_seconds, 1e-3), "{}", o.stall_seconds);
    assert!(close(o.recompute_seconds, 2e-3));
    assert!(close(o.step_seconds, 10e-3));
    assert!(o.h2d_end[0] <= o.first_use_start[0]);
    // The same trace without edges: the producer alone.
    let mut bare = chain();
    bare.ops.iter_mut().for_each(|op| op.inputs.clear());
    let setup = Setup::new(&bare, &A100_40GB, &[1.0, 1.0]);
    let o = simulate(
        &setup,
        &Plan {
            decisions: vec![Decision::Drop, Decision::Drop],
            prefetch_at: vec![0, 0],
            memory_budget: None,
        },
    );
    assert!(
        close(o.recompute_seconds, 2e-3),
        "op 2 at op 4, op 0 at op 6"
    );
    // Edges must point back to forward ops.
    let mut bad = chain();
    bad.ops[1].inputs = vec![2];
    assert!(bad.validate().is_err());
    let mut bad = chain();
    bad.ops[4].inputs = vec![0];
    assert!(bad.validate().is_err());
    let mut bad = chain();
    bad.ops[5].output_bytes = 1;
    assert!(
        bad.validate().is_err(),
        "only forward ops have outputs to recompute"
    );
}

#[test]
fn traces_with_broken_ordering_are_rejected() {
    let mut t = tiny();
    t.activations[0].first_backward_use = 1; // a forward op
    assert!(t.validate().is_err());
    let mut t = tiny();
    t.ops[3].phase = Phase::Forward;
    assert!(t.validate().is_err());
    let mut t = tiny();
    t.activations[0].last_backward_use = 9;
    assert!(t.validate().is_err());
}

/// Four forward and six backward ops of 1 ms: `a0` (48 MB, 2 ms each way on the link) from op 0
/// to op 9, `a1` (24 MB) from op 1 to op 4.
fn offload_or_recompute() -> Trace {
    Trace {
        format: "planepack-trace/1".into(),
        model: "offload-or-recompute".into(),
        description: String::new(),
        dtype: "bf16".into(),
        batch: 1,
        ops: (0..10)
            .map(|i| {
                ms_op(
                    i,
                    if i < 4 {
                        Phase::Forward
                    } else {
                        Phase::Backward
                    },
                    vec![],
                )
            })
            .collect(),
        activations: vec![saved(0, 48_000_000, 0, 0, 9), saved(1, 24_000_000, 1, 3, 4)],
    }
}

#[test]
fn offloading_first_stalls_where_the_cheapest_move_recomputes() {
    let t = offload_or_recompute();
    t.validate().unwrap();
    let setup = Setup::new(&t, &A100_40GB, &[1.0, 1.0]);
    let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
    // 48 MB budget: ops 1-4 hold 72 MB with everything kept. Dropping a0 costs op 0 again
    // (1 ms) before op 9; swapping it makes op 1 wait for its 2 ms D2H copy.
    let cheapest = plan_with(&setup, 48_000_000, Search::default());
    assert!(cheapest.feasible);
    assert_eq!(cheapest.plan.decisions, [Decision::Drop, Decision::Keep]);
    assert!(close(cheapest.outcome.step_seconds, 11e-3));
    let search = Search {
        swap_first: true,
        ..Search::default()
    };
    let first = plan_with(&setup, 48_000_000, search);
    assert!(first.feasible);
    assert_eq!(first.plan.decisions, [Decision::Swap, Decision::Keep]);
    assert!(close(first.outcome.memory_wait_seconds, 2e-3));
    assert!(close(first.outcome.step_seconds, 12e-3));
    // Compressed 2x, the same plans: the swap's wait halves, the recomputation stays.
    let compressed = Setup::new(&t, &A100_40GB, &[2.0, 2.0]);
    assert!(close(
        simulate(&compressed, &first.plan).step_seconds,
        11e-3
    ));
    assert!(close(
        simulate(&compressed, &cheapest.plan).step_seconds,
        11e-3
    ));
}
