//! Elementwise kernels (`elementwise.wgsl`): unary and binary ops from their `Wgsl` tables,
//! their gradients, comparisons, `where` and logical not.

use super::{array_ty, binding, groups_for, is_compute, prelude, scalar, scalar_bytes, strided_params};
use crate::backend::gpu::context::{Buffer, Ctx};
use crate::backend::gpu::template::Family;
use crate::backend::gpu::GpuStorage;
use crate::backend::Wgsl;
use crate::dtype::DType;
use crate::shape::Layout;

pub(super) static FAMILY: Family = Family::new("elementwise.wgsl", include_str!("../wgsl/elementwise.wgsl"));

/// A WGSL elementwise kernel: `out[i] = value`, reading operand `k` of `inputs` at
/// `at(i, k)` through its layout (all of `shape`), with the op's scalars as `p0`, `p1`.
fn elementwise(
    ctx: &'static Ctx,
    dtype: DType,
    out_dtype: DType,
    shape: &[usize],
    inputs: &[(&GpuStorage, &Layout, &str)],
    scalars: Option<[f64; 2]>,
    value: &str,
) -> GpuStorage {
    let n: usize = shape.iter().product();
    let out = GpuStorage::uninit(ctx, out_dtype, n);
    if n == 0 {
        return out;
    }
    if out_dtype.is_half() || inputs.iter().any(|(s, _, _)| s.dtype().is_half()) {
        return elementwise_half(ctx, out, shape, inputs, scalars, value);
    }
    let mut decls = String::new();
    let mut reads = String::new();
    let mut bufs: Vec<&Buffer> = Vec::new();
    let mut next = 1;
    let k_buf;
    if let Some(ps) = scalars {
        decls += &binding(next, "K", scalar(dtype), false);
        reads += "    let p0 = K[0];\n    let p1 = K[1];\n";
        k_buf = ctx.upload(&scalar_bytes(dtype, &ps));
        bufs.push(&k_buf);
        next += 1;
    }
    for (k, (s, _, name)) in inputs.iter().enumerate() {
        decls += &binding(next, &format!("I{k}"), array_ty(s.dtype()), false);
        reads += &format!("    let {name} = I{k}[at(i, {k}u)];\n");
        bufs.push(s.buffer());
        next += 1;
    }
    decls += &binding(next, "Y", array_ty(out_dtype), true);
    bufs.push(out.buffer());
    let src = FAMILY.render(
        "elementwise",
        &[
            ("PRELUDE", prelude()),
            (
                "MATH",
                &format!(
                    "{}{}",
                    FAMILY.kernel("math"),
                    FAMILY.kernel(if dtype == DType::F64 { "pick_f64" } else { "pick_f32" })
                ),
            ),
            ("BINDINGS", &decls),
            ("READS", &reads),
            ("VALUE", value),
        ],
    );
    let layouts: Vec<&Layout> = inputs.iter().map(|(_, l, _)| *l).collect();
    ctx.dispatch(&src, &strided_params(shape, &layouts), &bufs, groups_for(n));
    out
}

/// [`elementwise`] with a half operand or output (`elementwise_half` in the `.wgsl`): half
/// operands widened to `f32` as they are read, the value computed in `f32` (the kernels'
/// expressions for `f32`), a half output rounded once, as the CPU's half kernels do (one
/// pass: no conversion kernel before or after). A half output is written two elements,
/// one word, per thread, so that no two threads share a word.
fn elementwise_half(
    ctx: &'static Ctx,
    out: GpuStorage,
    shape: &[usize],
    inputs: &[(&GpuStorage, &Layout, &str)],
    scalars: Option<[f64; 2]>,
    value: &str,
) -> GpuStorage {
    let n = out.len();
    let (mut decls, mut loads, mut reads) = (String::new(), String::new(), String::new());
    let mut bufs: Vec<&Buffer> = Vec::new();
    let mut next = 1;
    let k_buf;
    if let Some(ps) = scalars {
        decls += &binding(next, "K", "f32", false);
        reads += "    let p0 = K[0];\n    let p1 = K[1];\n";
        k_buf = ctx.upload(&scalar_bytes(DType::F32, &ps));
        bufs.push(&k_buf);
        next += 1;
    }
    for (k, (s, _, name)) in inputs.iter().enumerate() {
        let input = format!("I{k}");
        decls += &binding(next, &input, array_ty(s.dtype()), false);
        loads += &match s.dtype() {
            DType::F16 => FAMILY.render("load_f16_in", &[("NAME", &input)]),
            DType::BF16 => FAMILY.render("load_bf16_in", &[("NAME", &input)]),
            other => FAMILY.render("load_word_in", &[("NAME", &input), ("T", array_ty(other))]),
        };
        reads += &format!("    let {name} = load_{input}(at(i, {k}u));\n");
        bufs.push(s.buffer());
        next += 1;
    }
    decls += &binding(next, "Y", array_ty(out.dtype()), true);
    bufs.push(out.buffer());
    let (out_ty, store, threads) = match out.dtype() {
        DType::F16 => ("f32", FAMILY.render("store_half", &[("BITS", "f16_bits")]), n.div_ceil(2)),
        DType::BF16 => ("f32", FAMILY.render("store_half", &[("BITS", "bf16_bits")]), n.div_ceil(2)),
        other => (array_ty(other), FAMILY.kernel("store_word").to_string(), n),
    };
    let math = format!("{}{}", FAMILY.kernel("math"), FAMILY.kernel("pick_f32"));
    let src = FAMILY.render(
        "elementwise_half",
        &[
            ("PRELUDE", prelude()),
            ("MATH", &math),
            ("HALF_BITS", super::convert::FAMILY.kernel("half_bits")),
            ("BINDINGS", &decls),
            ("LOADS", &loads),
            ("OUT_T", out_ty),
            ("READS", &reads),
            ("VALUE", value),
            ("STORE", &store),
        ],
    );
    let layouts: Vec<&Layout> = inputs.iter().map(|(_, l, _)| *l).collect();
    ctx.dispatch(&src, &strided_params(shape, &layouts), &bufs, groups_for(threads));
    out
}

/// Whether `dtype` has the kernels of [`Wgsl`] `w`: `f32`, the half types (computed in
/// `f32`) and `f64` on an adapter with `f64` where the op has an `f64` form.
fn supports(ctx: &Ctx, dtype: DType, w: &Wgsl) -> bool {
    dtype == DType::F32 || dtype.is_half() || (dtype == DType::F64 && ctx.f64 && !w.f32_only)
}

/// `f(x)` elementwise.
pub(crate) fn unary(x: &GpuStorage, l: &Layout, w: &Wgsl, scalars: [f64; 2]) -> Option<GpuStorage> {
    let ctx = x.ctx();
    supports(ctx, x.dtype(), w).then(|| {
        let t = scalar(x.dtype());
        elementwise(ctx, x.dtype(), x.dtype(), l.shape(), &[(x, l, "x")], Some(scalars), &format!("{t}({})", w.f))
    })
}

/// `g * f'(x, y)` elementwise.
pub(crate) fn unary_grad(
    (g, lg): (&GpuStorage, &Layout),
    (x, lx): (&GpuStorage, &Layout),
    (y, ly): (&GpuStorage, &Layout),
    w: &Wgsl,
    scalars: [f64; 2],
) -> Option<GpuStorage> {
    let ctx = g.ctx();
    supports(ctx, g.dtype(), w).then(|| {
        let value = format!("g * {}({})", scalar(g.dtype()), w.d1);
        elementwise(
            ctx,
            g.dtype(),
            g.dtype(),
            lg.shape(),
            &[(g, lg, "g"), (x, lx, "x"), (y, ly, "y")],
            Some(scalars),
            &value,
        )
    })
}

/// `f(a, b)` elementwise over layouts broadcast to one shape.
pub(crate) fn binary((a, la): (&GpuStorage, &Layout), (b, lb): (&GpuStorage, &Layout), w: &Wgsl) -> Option<GpuStorage> {
    let ctx = a.ctx();
    supports(ctx, a.dtype(), w).then(|| {
        elementwise(ctx, a.dtype(), a.dtype(), la.shape(), &[(a, la, "a"), (b, lb, "b")], None, &format!("({})", w.f))
    })
}

/// `g * df/da` (`lhs`) or `g * df/db` at the shape of `g`.
pub(crate) fn binary_grad(
    (g, lg): (&GpuStorage, &Layout),
    (a, la): (&GpuStorage, &Layout),
    (b, lb): (&GpuStorage, &Layout),
    w: &Wgsl,
    lhs: bool,
) -> Option<GpuStorage> {
    let ctx = g.ctx();
    supports(ctx, g.dtype(), w).then(|| {
        let value = format!("g * {}({})", scalar(g.dtype()), if lhs { w.d1 } else { w.d2 });
        elementwise(ctx, g.dtype(), g.dtype(), lg.shape(), &[(g, lg, "g"), (a, la, "a"), (b, lb, "b")], None, &value)
    })
}

/// A bool buffer: for each pair, whether its ordering is one of `accept` (less, equal,
/// greater); false where unordered (NaN).
pub(crate) fn compare(
    (a, la): (&GpuStorage, &Layout),
    (b, lb): (&GpuStorage, &Layout),
    accept: [bool; 3],
) -> Option<GpuStorage> {
    if !is_compute(a.dtype()) && !a.dtype().is_half() {
        return None;
    }
    let [lt, eq, gt] = accept.map(|t| if t { "1u" } else { "0u" });
    let value = format!("select(select(select(0u, {gt}, a > b), {eq}, a == b), {lt}, a < b)");
    Some(elementwise(a.ctx(), a.dtype(), DType::Bool, la.shape(), &[(a, la, "a"), (b, lb, "b")], None, &value))
}

/// `a` where the bool buffer `c` is true, `b` elsewhere.
pub(crate) fn select(
    (c, lc): (&GpuStorage, &Layout),
    (a, la): (&GpuStorage, &Layout),
    (b, lb): (&GpuStorage, &Layout),
) -> Option<GpuStorage> {
    // Half values go through f32 and back: exact, but for a NaN's payload, which comes
    // back quieted (as every half kernel writes NaN).
    if !matches!(a.dtype(), DType::F32 | DType::F64 | DType::Bool | DType::F16 | DType::BF16) {
        return None;
    }
    Some(elementwise(
        c.ctx(),
        a.dtype(),
        a.dtype(),
        lc.shape(),
        &[(c, lc, "c"), (a, la, "a"), (b, lb, "b")],
        None,
        "select(b, a, c != 0u)",
    ))
}

/// Logical not of a bool buffer.
pub(crate) fn logical_not(x: &GpuStorage, l: &Layout) -> GpuStorage {
    elementwise(x.ctx(), DType::Bool, DType::Bool, l.shape(), &[(x, l, "x")], None, "select(1u, 0u, x != 0u)")
}
