//! The optimizer step (`optim.wgsl`): an optimizer's WGSL statements over a parameter, its
//! gradient and its state buffers.

use super::{binding, groups_for, prelude, scalar, scalar_bytes, u32_of};
use crate::backend::gpu::template::Family;
use crate::backend::gpu::GpuStorage;

pub(super) static FAMILY: Family = Family::new("optim.wgsl", include_str!("../wgsl/optim.wgsl"));

/// One optimizer step over the `n` elements of a contiguous parameter starting at
/// `offset` in `p`: the optimizer's WGSL `body` (see `backend::update::UpdateRule::wgsl`) with its
/// gradient `g` and state buffers.
pub(crate) fn optimizer_step(
    p: &GpuStorage,
    offset: usize,
    n: usize,
    g: &GpuStorage,
    state: &[&GpuStorage],
    body: &str,
    scalars: &[f64],
) {
    if n == 0 {
        return;
    }
    let ctx = p.ctx();
    let t = scalar(p.dtype());
    let (mut decls, mut load, mut store) = (String::new(), String::new(), String::new());
    for j in 0..3 {
        if j < state.len() {
            decls += &binding(4 + j as u32, &format!("B{j}"), t, true);
            load += &format!("    var b{j} = B{j}[i];\n");
            store += &format!("    B{j}[i] = b{j};\n");
        } else {
            load += &format!("    var b{j} = {t}(0.0);\n");
        }
    }
    let src = FAMILY.render(
        "step",
        &[("PRELUDE", prelude()), ("T", t), ("STATE", &decls), ("LOAD", &load), ("STORE", &store), ("BODY", body)],
    );
    let kb = ctx.upload(&scalar_bytes(p.dtype(), scalars));
    let mut bufs = vec![&kb, p.buffer(), g.buffer()];
    bufs.extend(state.iter().map(|s| s.buffer()));
    ctx.dispatch(&src, &[u32_of("element count", n), u32_of("offset", offset)], &bufs, groups_for(n));
}
