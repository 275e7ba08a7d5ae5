// Workgroup-wide prefix sums in workgroup memory, for adapters without subgroup operations.
//
// Included after a kernel that defines `const WG: u32` (invocations per workgroup) and
// `fn run(wg: vec3<u32>)`. Invocation `slot` (= local_invocation_index here) owns position
// `slot` of every scan.

var<workgroup> scan_buf: array<u32, WG>;
var<private> slot: u32;

// (exclusive prefix, total) of `x` over slots 0..WG. Must be called by every invocation.
fn scan(x: u32) -> vec2<u32> {
    scan_buf[slot] = x;
    workgroupBarrier();
    for (var off = 1u; off < WG; off = off << 1u) {
        var v = scan_buf[slot];
        if (slot >= off) {
            v = v + scan_buf[slot - off];
        }
        workgroupBarrier();
        scan_buf[slot] = v;
        workgroupBarrier();
    }
    let inclusive = scan_buf[slot];
    let total = scan_buf[WG - 1u];
    workgroupBarrier();
    return vec2<u32>(inclusive - x, total);
}

// No invocations share a subgroup here (scan_subgroup.wgsl's `shuffle_lanes`): kernels take
// their workgroup-memory paths.
fn shuffle_lanes() -> u32 {
    return 0u;
}

fn lane_shuffle(v: u32, src: u32) -> u32 {
    return v;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    slot = li;
    run(wg);
}
