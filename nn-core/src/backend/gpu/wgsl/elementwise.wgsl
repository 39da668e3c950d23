// Elementwise kernels (unary and binary ops, their gradients, comparisons, `where`): one
// thread per output element, `Y[i] = {{VALUE}}`.
//
// Placeholders of `elementwise`: `{{PRELUDE}}` and `{{MATH}}` (the snippets), `{{BINDINGS}}`
// (the op's scalars `K` when it has some, the inputs `I0`, `I1`, ... and the output `Y`),
// `{{READS}}` (`let x = I0[at(i, 0u)];` per input, and `p0`, `p1` from `K`) and `{{VALUE}}`,
// the op's expression (from the `Wgsl` tables of `backend::elementwise`). Those of
// `elementwise_half` besides: `{{HALF_BITS}}` (`convert.wgsl`'s rounding functions),
// `{{LOADS}}` (a `load_*_in` snippet per input, `{{NAME}}` its binding), `{{OUT_T}}` (the
// value's type) and `{{STORE}}` (`store_word`, or `store_half` with `{{BITS}}`).

//# elementwise
{{PRELUDE}}
{{MATH}}
{{BINDINGS}}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = flat(id, nw);
    if (i >= P[0]) { return; }
{{READS}}
    Y[i] = {{VALUE}};
}

//# elementwise_half
// The elementwise kernel with an `f16` or `bf16` operand or output: a half operand is bound
// as words of two elements and widened to f32 as it is read (`load_I0(o)`, ...), the value
// computed in f32, and a half output rounded as the CPU rounds it, two elements (one
// word) per thread. The placeholders besides `elementwise`'s: the inputs' `load_*_in`
// snippets, the value's type and one of the `store_*` snippets (see the file's comment).
{{PRELUDE}}
{{MATH}}
{{HALF_BITS}}
{{BINDINGS}}
{{LOADS}}
fn value_at(i: u32) -> {{OUT_T}} {
{{READS}}
    return {{VALUE}};
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = flat(id, nw);
{{STORE}}
}

//# load_word_in
fn load_{{NAME}}(o: u32) -> {{T}} {
    return {{NAME}}[o];
}

//# load_f16_in
fn load_{{NAME}}(o: u32) -> f32 {
    return unpack2x16float({{NAME}}[o >> 1u])[o & 1u];
}

//# load_bf16_in
fn load_{{NAME}}(o: u32) -> f32 {
    return bitcast<f32>((({{NAME}}[o >> 1u] >> ((o & 1u) * 16u)) & 0xffffu) << 16u);
}

//# store_word
    if (i >= P[0]) { return; }
    Y[i] = value_at(i);

//# store_half
    let e = 2u * i;
    if (e >= P[0]) { return; }
    let lo = {{BITS}}(value_at(e));
    var hi = 0u;
    if (e + 1u < P[0]) { hi = {{BITS}}(value_at(e + 1u)); }
    Y[i] = lo | (hi << 16u);

//# math
// The helpers elementwise expressions may call (see `backend::Wgsl`), in f32.

// IEEE 754 `pow`, as Rust's `powf` (and PyTorch): 1 for `b == 0` and for `a == 1`, NaN
// included; NaN from a NaN operand otherwise; for an infinite `b`, 1 at `|a| == 1` and
// else 0 or inf by `|a| < 1` and the sign of `b` (negative bases included); zero and
// infinite bases by the rules of `pow(+-0, b)` and `pow(+-inf, b)`, not through `log2(0)`
// and `exp2(+-inf)` (which drivers need not honour). The base's sign is read from its bits,
// so that -0 counts as negative (`pow(-0, -1) = -inf`, `pow(-0, 3) = -0`); NaN only for a
// finite negative base (not -0) with a non-integer `b`. The sign of an odd integer power
// is set on the bits, as the zero's is read (a -0 result stays -0).
fn powf_(a: f32, b: f32) -> f32 {
    if (b == 0.0 || a == 1.0) { return 1.0; }
    if (isnan_(a) || isnan_(b)) { return a + b; }
    let inf = bitcast<f32>(0x7f800000u);
    let z = abs(a);
    if ((bitcast<u32>(b) & 0x7fffffffu) == 0x7f800000u) {
        if (z == 1.0) { return 1.0; }
        return select(0.0, inf, (z < 1.0) == (b < 0.0));
    }
    let negative = (bitcast<u32>(a) >> 31u) == 1u;
    let z_inf = (bitcast<u32>(z)) == 0x7f800000u;
    let integer = fract(b) == 0.0;
    if (negative && z != 0.0 && !z_inf && !integer) { return bitcast<f32>(0x7fc00000u); }
    var r: f32;
    if (z == 0.0 || z_inf) {
        // 0^b: inf for b < 0, 0 for b > 0; inf^b the other way round.
        r = select(0.0, inf, (b < 0.0) == (z == 0.0));
    } else {
        r = exp2(b * log2(z));
    }
    // Odd integers: fract(b / 2) is 0.5 (exact: |b| < 2^24 there, all larger floats are even).
    if (negative && integer && fract(b * 0.5) != 0.0) {
        return bitcast<f32>(bitcast<u32>(r) | 0x80000000u);
    }
    return r;
}

fn erfc_(x: f32) -> f32 {
    let z = abs(x);
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806
        + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))));
    return select(2.0 - r, r, x >= 0.0);
}

// erf: the Taylor series below 0.5 (relative error below 1e-9 there, where 1 - erfc
// would lose the leading digits), 1 - erfc_ above (within 2 ulp).
fn erf_(x: f32) -> f32 {
    if (isnan_(x)) { return x; }
    if (abs(x) < 0.5) {
        let x2 = x * x;
        let p = 1.0 + x2 * (-0.3333333333 + x2 * (0.1 + x2 * (-0.0238095238 + x2 * (0.0046296296 - x2 * 0.0007575758))));
        return 1.1283791671 * x * p;
    }
    return sign(x) * (1.0 - erfc_(abs(x)));
}

// erfinv: Giles' single-precision approximation (relative error below 3e-7 on f32
// inputs), infinite at +-1 and NaN outside [-1, 1].
fn erfinv_(x: f32) -> f32 {
    if (abs(x) >= 1.0) {
        return select(bitcast<f32>(0x7fc00000u), sign(x) * bitcast<f32>(0x7f800000u), abs(x) == 1.0);
    }
    var w = -log((1.0 - x) * (1.0 + x));
    var p: f32;
    if (w < 5.0) {
        w = w - 2.5;
        p = 2.81022636e-08;
        p = 3.43273939e-07 + p * w;
        p = -3.5233877e-06 + p * w;
        p = -4.39150654e-06 + p * w;
        p = 0.00021858087 + p * w;
        p = -0.00125372503 + p * w;
        p = -0.00417768164 + p * w;
        p = 0.246640727 + p * w;
        p = 1.50140941 + p * w;
    } else {
        w = sqrt(w) - 3.0;
        p = -0.000200214257;
        p = 0.000100950558 + p * w;
        p = 0.00134934322 + p * w;
        p = -0.00367342844 + p * w;
        p = 0.00573950773 + p * w;
        p = -0.0076224613 + p * w;
        p = 0.00943887047 + p * w;
        p = 1.00167406 + p * w;
        p = 2.83297682 + p * w;
    }
    return p * x;
}

fn tanh_(x: f32) -> f32 {
    let z = abs(x);
    if (z < 0.2) {
        let x2 = x * x;
        return x * (1.0 + x2 * (-0.3333333333 + x2 * (0.1333333333 + x2 * (-0.0539682540 + x2 * 0.0218694885))));
    }
    let e = exp(-2.0 * z);
    return sign(x) * (1.0 - e) / (1.0 + e);
}

//# pick_f32
// `t` where `c`, else `f`, chosen by masking the bits with a mask the compiler cannot
// trace back to the comparison. NVIDIA's compiler turned a select between two compared
// values into a max instruction, which gave +0 for maximum(-0, +0) where the CPU (and
// PyTorch's CPU) give the first operand; it saw through a select on the bits and through
// a mask made from the comparison too (H200, driver 580). `P[0] >> 31` is always 0 (an
// element count: a storage binding holds under 2^32 bytes, so under 2^31 of any type of
// two bytes or more), but it is read at run time, so the mask stays opaque.
fn pick_(f: f32, t: f32, c: bool) -> f32 {
    let m = select(0u, 0xffffffffu, c) ^ (P[0] >> 31u);
    return bitcast<f32>((bitcast<u32>(t) & m) | (bitcast<u32>(f) & ~m));
}

//# pick_f64
fn pick_(f: f64, t: f64, c: bool) -> f64 {
    return select(f, t, c);
}
