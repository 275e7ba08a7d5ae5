// Workgroup-wide prefix sums with subgroup operations, for any subgroup size (4 to 128).
//
// Included after a kernel that defines `const WG: u32` and `fn run(wg: vec3<u32>)`.
// Nothing is assumed about how invocations map to subgroups: each subgroup takes a number
// from a workgroup counter, and lane `l` of subgroup `s` owns slot `s * subgroup_size + l`, so
// a subgroup's inclusive add is in slot order. Subgroup totals are combined in workgroup
// memory. If the adapter forms subgroups this scheme cannot number (a partial subgroup next
// to others, a slot past WG), the kernel sets ERR_LAYOUT and decodes nothing; the host then
// runs the workgroup-memory kernel instead.

var<workgroup> sg_count: atomic<u32>;
var<workgroup> sg_bad: atomic<u32>;
var<workgroup> sg_uniform: u32;
var<workgroup> sg_totals: array<u32, WG>;
var<private> slot: u32;
var<private> my_sg: u32;
var<private> n_sg: u32;
var<private> my_lane: u32;
var<private> sg_lanes: u32;

// The invocations whose `slot` is their lane in one subgroup: slots 0 .. shuffle_lanes() - 1
// (the subgroup numbered 0 above, lane `l` owning slot `l`); `lane_shuffle(v, src)` gives such
// an invocation slot `src`'s `v` (src below shuffle_lanes(); called by the whole subgroup).
// The workgroup path has none (scan_workgroup.wgsl: 0).
fn shuffle_lanes() -> u32 {
    return sg_lanes;
}

fn lane_shuffle(v: u32, src: u32) -> u32 {
    return subgroupShuffle(v, src);
}

// True in one invocation of the subgroup (the first active one).
fn elected() -> bool {
    return my_lane == subgroupBroadcastFirst(my_lane);
}

fn scan(x: u32) -> vec2<u32> {
    let inclusive = subgroupInclusiveAdd(x);
    let total = subgroupAdd(x);
    if (elected()) {
        sg_totals[my_sg] = total;
    }
    workgroupBarrier();
    var base = 0u;
    var all = 0u;
    for (var i = 0u; i < n_sg; i = i + 1u) {
        let t = sg_totals[i];
        if (i < my_sg) {
            base = base + t;
        }
        all = all + t;
    }
    workgroupBarrier();
    return vec2<u32>(base + inclusive - x, all);
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
    @builtin(subgroup_size) sg_size: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    if (li == 0u) {
        atomicStore(&sg_count, 0u);
        atomicStore(&sg_bad, 0u);
    }
    workgroupBarrier();
    my_lane = lane;
    var s = 0u;
    if (elected()) {
        s = atomicAdd(&sg_count, 1u);
    }
    my_sg = subgroupBroadcastFirst(s);
    slot = my_sg * sg_size + lane;
    sg_lanes = sg_size;
    let live = subgroupAdd(1u);
    workgroupBarrier();
    n_sg = atomicLoad(&sg_count);
    if (slot >= WG || (n_sg > 1u && live != sg_size)) {
        atomicStore(&sg_bad, 1u);
    }
    workgroupBarrier();
    if (li == 0u) {
        sg_uniform = atomicLoad(&sg_bad);
    }
    let bad = workgroupUniformLoad(&sg_uniform);
    if (bad != 0u) {
        if (li == 0u) {
            atomicOr(&status[0], ERR_LAYOUT);
        }
        return;
    }
    run(wg);
}
