// The optimizer step: one thread per element of a contiguous parameter at offset `P[1]`
// in `Pp`, `P = [n, offset]`; the optimizer's statements update `p` from the gradient `g`,
// its scalars `k` and its state `b0`, `b1`, `b2` (zero when it keeps fewer buffers).
//
// Placeholders: `{{PRELUDE}}`; `{{T}}`, the parameter's dtype; `{{STATE}}`, the bindings
// `B0`, ... of the state buffers; `{{LOAD}}` and `{{STORE}}`, the statements that read
// them into `b0`, `b1`, `b2` and write them back; `{{BODY}}`, the optimizer's statements
// (`optim::DeviceKernel`).

//# step
{{PRELUDE}}
@group(0) @binding(1) var<storage, read> k: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> Pp: array<{{T}}>;
@group(0) @binding(3) var<storage, read> G: array<{{T}}>;
{{STATE}}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = flat(id, nw);
    if (i >= P[0]) { return; }
    let o = P[1] + i;
    var p = Pp[o];
    let g = G[i];
{{LOAD}}
{{BODY}}
    Pp[o] = p;
{{STORE}}
}
