//! Which GEMM variant runs a product ([`super::gemm`]): forced, measured once per adapter and
//! size class, or the general one when the choice is refused.
//!
//! # Autotuning
//! Products of fewer than [`SMALL_FLOPS`] multiply-adds run `t32x32_4x4` (launch costs rule
//! there). Larger ones are grouped into size classes: the element encoding, the two
//! operands' load modes, a bucket for each of m, n and k (up to 16, 64, 256, 1024, 4096,
//! larger), whether there is a batch, whether `beta * I` is added and whether the kernels
//! are compiled with runtime checks (the last two make other kernels, each checked on its
//! own). The first product of a class on an adapter times every variant the adapter runs
//! for it (each compiled if it was not, once to warm up, then up to three times, each up to
//! the host's read of one word of the result, keeping the fastest time) on the leading
//! block of at most [`TUNE_CAP`] per dim of its own operands, writing its own output
//! buffer. When the product is larger and the fastest time, scaled to the product (at most
//! [`REAL_CAP`] per dim), is at most [`REAL_BUDGET`], the [`FINALISTS`] fastest (and the
//! fastest of each 128-row block shape) are timed again at that size, which decides (large
//! tiles pay off at large sizes only). Every candidate's product of the first round's block
//! is read back and checked against the general variant's (within rounding, see
//! [`agrees`]): one that differs (a kernel never run on this kind of adapter, a driver's
//! miscompilation) is refused, and [`crate::gpu::gemm_report`] says so. The chosen variant
//! is kept in the adapter's table (a `Mutex<BTreeMap>` in [`GemmState`]) and serves every
//! later product of the class without waiting, except one deeper than the block it was
//! checked on when it sums in f16 (see [`GemmState::f16_sums`]): the fastest variant
//! summing in f32 runs those. These reads are the GEMM's only host waits: once per class
//! and adapter, counted in [`crate::gpu::GemmReport::tuning_waits`].
//!
//! # Forcing a variant
//! `NN_GPU_GEMM=<variant>` (read once) or [`crate::gpu::force_gemm`] make every product run
//! that variant where it can (the general one otherwise, saying why in
//! [`crate::gpu::GemmReport::last`]); `auto` restores tuning. A `+packed` suffix makes f16
//! tensors go through the packed-word path even on adapters with `SHADER_F16`; a `+checked`
//! suffix (or `NN_GPU_GEMM_CHECKED=1`, with any spec) compiles the kernels with wgpu's runtime
//! checks, which they otherwise go without (see [`super::gemm::compile`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::context::{count, Buffer, Ctx, Kernel as Pipeline};
use super::gemm_caps::{Caps, Enc};
use super::gemm_kernel::{compile, Call, Kernel};
use super::gemm_variants::{Algo, GENERAL, SMALL, VARIANTS};
use super::lock;

/// Multiply-adds under which a product runs `t32x32_4x4` untuned.
pub(crate) const SMALL_FLOPS: usize = 1 << 21;

/// The largest m, n and k the first round of tuning computes.
pub(crate) const TUNE_CAP: usize = 1024;

/// Non-finite products of a class after which it keeps the general variant (see [`tuned`]).
pub(crate) const NON_FINITE_TRIES: u32 = 3;

/// The largest m, n and k the second round computes (the size itself, up to this).
pub(crate) const REAL_CAP: usize = 4096;

/// The variants the second round times again.
pub(crate) const FINALISTS: usize = 3;

/// The second round runs when the fastest variant's time, scaled from the first round's
/// block to the second's, is at most this (each of the up to six finalists runs up to four
/// times: about 4 s once per size class at most).
pub(crate) const REAL_BUDGET: Duration = Duration::from_millis(150);

/// A size class (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Class {
    enc: &'static str,
    modes: [u32; 2],
    /// Bucket bounds of m, n, k (`usize::MAX` past 4096).
    mnk: [usize; 3],
    batched: bool,
    /// Whether `beta * I` is added: another kernel (the input's epilogue), checked on its own.
    input: bool,
    /// Kernels compiled with wgpu's runtime checks: other pipelines, checked on their own.
    checked: bool,
}

impl Class {
    fn of(call: &Call<'_>, checked: bool) -> Class {
        let bucket = |d: usize| [16, 64, 256, 1024, 4096].into_iter().find(|&b| d <= b).unwrap_or(usize::MAX);
        let [m, k, n] = call.mkn;
        Class {
            enc: call.enc.name(),
            modes: call.modes,
            mnk: [m, n, k].map(bucket),
            batched: call.batch() > 1,
            input: call.has_input(),
            checked,
        }
    }
}

impl std::fmt::Display for Class {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.enc)?;
        for (d, b) in ["m", "n", "k"].iter().zip(self.mnk) {
            match b {
                usize::MAX => write!(f, " {d}>4096")?,
                b => write!(f, " {d}<={b}")?,
            }
        }
        write!(f, " modes {:?}", self.modes)?;
        for (on, what) in [(self.batched, " batched"), (self.input, " input"), (self.checked, " checked")] {
            if on {
                write!(f, "{what}")?;
            }
        }
        Ok(())
    }
}

/// A class's entry in the tuning table.
struct Tuned {
    /// Index in [`VARIANTS`] of the variant chosen.
    variant: usize,
    /// Every candidate's time, or why the general variant was kept (what the report shows).
    times: String,
    /// When `variant` sums in f16 ([`GemmState::f16_sums`]): the depth k of the block its
    /// product was checked on, and the variant that runs the class's deeper products.
    shallow: Option<(usize, usize)>,
}

impl Tuned {
    /// The variant that runs a product of depth `k` of the class, with why when it is not
    /// the one chosen.
    fn for_depth(&self, k: usize) -> (usize, Option<String>) {
        match self.shallow {
            Some((checked, deeper)) if k > checked => {
                let name = VARIANTS[self.variant].name;
                (deeper, Some(format!("tuned; `{name}` sums in f16 and was checked at k = {checked} only")))
            }
            _ => (self.variant, None),
        }
    }
}

/// An adapter's GEMM state: what it offers, compiled kernels and refusals, the tuning table.
pub(crate) struct GemmState {
    pub(crate) caps: &'static Caps,
    /// Each kernel's pipeline once compiled, or the compiler's refusal.
    kernels: Mutex<HashMap<Kernel, Result<Arc<Pipeline>, String>>>,
    /// The tuning table: the variant chosen per class, with the times measured.
    tuned: Mutex<BTreeMap<Class, Tuned>>,
    /// The variant of the latest product, with why.
    last: Mutex<Option<String>>,
    /// Per class not tuned yet, how many of its products were not finite.
    non_finite: Mutex<HashMap<Class, u32>>,
    tuning_waits: AtomicU64,
}

impl GemmState {
    fn new(caps: &'static Caps) -> GemmState {
        GemmState {
            caps,
            kernels: Mutex::default(),
            tuned: Mutex::default(),
            last: Mutex::default(),
            non_finite: Mutex::default(),
            tuning_waits: AtomicU64::new(0),
        }
    }

    /// The pipeline of `kernel`, compiled once; `Err` is the refusal, remembered.
    fn compiled(&self, ctx: &Ctx, kernel: Kernel) -> Result<Arc<Pipeline>, String> {
        if let Some(r) = lock(&self.kernels).get(&kernel) {
            return r.clone();
        }
        let src = kernel.source(self.caps);
        #[cfg(test)]
        let src = if tests::BROKEN.lock().unwrap_or_else(|e| e.into_inner()).contains(&kernel) {
            src + "\nfn broken( {\n"
        } else if tests::WRONG.lock().unwrap_or_else(|e| e.into_inner()).contains(&kernel) {
            src.replace("let alpha = K[0];", "let alpha = K[0] * 1.5;")
        } else if tests::SILENT.lock().unwrap_or_else(|e| e.into_inner()).contains(&kernel) {
            src.replace(
                "fn store_run(e0: u32, cnt: u32) {",
                "fn store_run(e0: u32, cnt: u32) {\n    if (cnt > 0u) { return; }",
            )
        } else {
            src
        };
        let r = compile(ctx, kernel, &src).map_err(|e| {
            format!(
                "gpu:{} adapter `{}` failed to compile GEMM variant `{}` for {}: {e}",
                self.caps.ordinal,
                self.caps.adapter,
                VARIANTS[kernel.variant].name,
                kernel.enc.name()
            )
        });
        lock(&self.kernels).insert(kernel, r.clone());
        r
    }

    /// Why `variant` cannot run `call`, or `None` when it can (as far as is known before
    /// compiling it).
    fn unavailable(&self, call: &Call<'_>, variant: usize) -> Option<String> {
        let v = &VARIANTS[variant];
        if let Some(r) = self.caps.refusal(v) {
            return Some(r);
        }
        if !Kernel::serves(variant, call.enc) {
            return Some(format!("`{}` does not take {}", v.name, call.enc.name()));
        }
        let kernel = Kernel { variant, enc: call.enc, input: call.has_input(), checked: false };
        let [bm, bn] = kernel.block();
        if call.mkn[0].div_ceil(bm) > 65535 || call.mkn[2].div_ceil(bn) > 65535 {
            return Some(format!("`{}` would need more than 65535 workgroups", v.name));
        }
        match lock(&self.kernels).get(&kernel) {
            Some(Err(e)) => Some(e.clone()),
            _ => None,
        }
        // (The checked form of a kernel compiles from the same source, so the unchecked
        // form's refusal stands for both.)
    }

    /// Whether `variant` sums in f16 here (the `coop128x128` variants on an adapter without
    /// f32 sums): its rounding error grows with k, and f16 sums overflow where f32 ones do
    /// not, so agreeing on a block of some depth says nothing of deeper products. (Such an
    /// adapter now refuses those variants, [`Caps::refusal`]: a guard, never the best.)
    fn f16_sums(&self, variant: usize) -> bool {
        matches!(VARIANTS[variant].algo, Algo::CoopBlock { .. }) && self.caps.coop_sums() == "f16"
    }

    /// When `best` sums in f16: the variant for the class's products deeper than the block
    /// checked, the fastest summing in f32 of the second round (`finals`, empty when it did
    /// not run), else of the first (`times`; the general variant is always there).
    fn deeper(&self, best: usize, times: &[(Duration, usize)], finals: &[(Duration, usize)]) -> Option<usize> {
        let f32_sums = |list: &[(Duration, usize)]| list.iter().map(|&(_, v)| v).find(|&v| !self.f16_sums(v));
        self.f16_sums(best).then(|| f32_sums(finals).or_else(|| f32_sums(times)).unwrap_or(GENERAL))
    }
}

/// The GEMM state of `ctx`'s adapter, made when its first product runs.
pub(crate) fn state(ctx: &'static Ctx) -> &'static GemmState {
    static STATES: OnceLock<Vec<OnceLock<GemmState>>> = OnceLock::new();
    let states = STATES.get_or_init(|| (0..count()).map(|_| OnceLock::new()).collect());
    states[ctx.ordinal].get_or_init(|| GemmState::new(&ctx.gemm_caps))
}

/// A forced choice (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Forced {
    /// Index in [`VARIANTS`]; `None` tunes.
    pub(crate) variant: Option<usize>,
    /// f16 through packed words.
    pub(crate) packed: bool,
    /// Kernels compiled with wgpu's runtime checks (see [`super::gemm::compile`]).
    pub(crate) checked: bool,
}

impl std::str::FromStr for Forced {
    type Err = String;

    fn from_str(spec: &str) -> Result<Forced, String> {
        let (mut name, mut packed, mut checked) = (spec, false, false);
        loop {
            if let Some(rest) = name.strip_suffix("+packed") {
                (name, packed) = (rest, true);
            } else if let Some(rest) = name.strip_suffix("+checked") {
                (name, checked) = (rest, true);
            } else {
                break;
            }
        }
        let variant = match name {
            "auto" | "" => None,
            name => Some(VARIANTS.iter().position(|v| v.name == name).ok_or_else(|| {
                let names: Vec<&str> = VARIANTS.iter().map(|v| v.name).collect();
                format!(
                    "no GEMM variant `{name}`; the variants are auto, {} (each may end in +packed and/or +checked)",
                    names.join(", ")
                )
            })?),
        };
        Ok(Forced { variant, packed, checked })
    }
}

fn forced_cell() -> &'static Mutex<Forced> {
    static FORCED: OnceLock<Mutex<Forced>> = OnceLock::new();
    FORCED.get_or_init(|| {
        let spec = std::env::var("NN_GPU_GEMM").unwrap_or_default();
        let mut f: Forced = spec.parse().unwrap_or_else(|e| panic!("NN_GPU_GEMM={spec:?}: {e}"));
        f.checked |= std::env::var("NN_GPU_GEMM_CHECKED").is_ok_and(|v| v == "1");
        Mutex::new(f)
    })
}

/// The forced choice now in effect.
pub(crate) fn forced() -> Forced {
    *lock(forced_cell())
}

/// Sets the forced choice from a spec (`None`: `auto`).
///
/// # Panics
/// On a spec naming no variant; the message lists them.
pub(crate) fn force(spec: Option<&str>) {
    let f = spec.unwrap_or("auto").parse().unwrap_or_else(|e| panic!("force_gemm: {e}"));
    *lock(forced_cell()) = f;
}

/// The kernel that runs `call`, compiled, recording the choice as the adapter's latest
/// (`variant (why) [encoding]`).
/// Tuning (the first product of a size class) runs the candidates into `out`.
pub(crate) fn choose(call: &Call<'_>, forced: Forced, out: &Buffer) -> (Kernel, Arc<Pipeline>) {
    let state = state(call.ctx);
    let mut why = Vec::new();
    let [m, k, n] = call.mkn;
    let (mut variant, mut reason) = match forced.variant {
        Some(v) => match state.unavailable(call, v) {
            None => (v, "forced".to_string()),
            Some(e) => {
                why.push(format!("forced `{}` refused: {e}", VARIANTS[v].name));
                (GENERAL, String::new())
            }
        },
        None if call.batch() * m * n * k < SMALL_FLOPS => (SMALL, "small".to_string()),
        None => match tuned(call, forced.checked, out) {
            Some((v, why)) => (v, why.unwrap_or_else(|| "tuned".to_string())),
            None => (GENERAL, "untuned: a product with inf or NaN compares nothing".to_string()),
        },
    };
    let input = call.has_input();
    loop {
        let kernel = Kernel { variant, enc: call.enc, input, checked: forced.checked };
        match state.compiled(call.ctx, kernel) {
            Ok(pipeline) => {
                if !why.is_empty() {
                    reason = why.join("; ");
                }
                if forced.checked {
                    reason += ", checked";
                }
                if state.f16_sums(variant) {
                    reason += ", f16 sums: the adapter offers no f32 sums";
                }
                *lock(&state.last) = Some(format!("{} ({reason}) [{}]", VARIANTS[variant].name, call.enc.name()));
                return (kernel, pipeline);
            }
            Err(e) if variant != GENERAL => {
                why.push(e);
                (variant, reason) = (GENERAL, String::new());
            }
            Err(e) => panic!("{e}"),
        }
    }
}

/// The tuned variant of `call`'s class, measured now when the class is new: every variant
/// on the leading block of at most [`TUNE_CAP`] per dim, then, when the class is larger and
/// the estimate says it is cheap, the finalists ([`finalists`]) again at up to [`REAL_CAP`]
/// per dim, which decides. With the variant, why it is not the one chosen (see
/// [`Tuned::for_depth`]).
///
/// `None` when the general variant's product on the block is not finite (operands that
/// overflow, or a model gone to NaN): that cannot tell a right candidate from a wrong one,
/// so the general variant runs and the class is tuned by a later product; after
/// [`NON_FINITE_TRIES`] such products in a class it keeps the general variant (said in the
/// tuning table), rather than repeat the extra run and wait on every call.
fn tuned(call: &Call<'_>, checked: bool, out: &Buffer) -> Option<(usize, Option<String>)> {
    let state = state(call.ctx);
    let class = Class::of(call, checked);
    if let Some(entry) = lock(&state.tuned).get(&class) {
        return Some(entry.for_depth(call.mkn[1]));
    }
    let proxy = call.mkn.map(|d| d.min(TUNE_CAP));
    let input = call.has_input();
    let general = Kernel { variant: GENERAL, enc: call.enc, input, checked };
    let cells = proxy[0] * proxy[2];
    let reference = match state.compiled(call.ctx, general) {
        Ok(pipeline) => {
            call.run(general, &pipeline, out, Some(proxy));
            read(call, out, cells)
        }
        Err(e) => panic!("{e}"),
    };
    if reference.iter().any(|w| !w.is_finite()) {
        let mut tries = lock(&state.non_finite);
        let n = tries.entry(class).or_insert(0);
        *n += 1;
        if *n >= NON_FINITE_TRIES {
            let times = format!("general variant kept: {n} products in a row were not finite");
            lock(&state.tuned).insert(class, Tuned { variant: GENERAL, times, shallow: None });
        }
        return None;
    }
    let mut times = Vec::new();
    for (variant, v) in VARIANTS.iter().enumerate() {
        if state.unavailable(call, variant).is_some() {
            continue;
        }
        let kernel = Kernel { variant, enc: call.enc, input, checked };
        let Ok(pipeline) = state.compiled(call.ctx, kernel) else { continue };
        // NaN in every cell first: a candidate that leaves cells unwritten cannot pass on
        // what the one before it wrote there.
        poison(call, out, cells);
        let t = time(call, kernel, &pipeline, out, proxy);
        if variant != GENERAL {
            if let Err(e) = agrees(call.enc, &reference, &read(call, out, reference.len())) {
                let (gpu, adapter, name) = (state.caps.ordinal, &state.caps.adapter, v.name);
                let form = format!("{}{}", call.enc.name(), if input { " with an input" } else { "" });
                let why = format!(
                    "gpu:{gpu} adapter `{adapter}`: GEMM variant `{name}` computed a wrong product for {form} while \
                     tuning ({e}): refused"
                );
                lock(&state.kernels).insert(kernel, Err(why));
                continue;
            }
        }
        times.push((t, variant));
    }
    times.sort();
    let &(fastest, mut best) = times.first().expect("the general variant always runs");
    let row = |times: &[(Duration, usize)]| {
        times.iter().map(|(t, v)| format!("{} {}", VARIANTS[*v].name, ms(*t))).collect::<Vec<_>>().join(", ")
    };
    let mut table = row(&times);
    let real = call.mkn.map(|d| d.min(REAL_CAP));
    let scale = |mkn: [usize; 3]| mkn.iter().map(|&d| d as f64).product::<f64>();
    let estimate = fastest.mul_f64(scale(real) / scale(proxy));
    let mut finals = Vec::new();
    if real != proxy && estimate <= REAL_BUDGET {
        for variant in finalists(&times, call.enc, input) {
            let kernel = Kernel { variant, enc: call.enc, input, checked };
            let Ok(pipeline) = state.compiled(call.ctx, kernel) else { continue };
            finals.push((time(call, kernel, &pipeline, out, real), variant));
        }
        finals.sort();
        best = finals[0].1;
        let [m, k, n] = real;
        table += &format!("; at {m}x{k}x{n}: {}", row(&finals));
    }
    // Checked on the block's depth only: deeper products of the class go to a variant
    // summing in f32 (the class's k bucket reaches past the block's k).
    let shallow = state.deeper(best, &times, &finals).map(|deeper| {
        let (k, name) = (proxy[1], VARIANTS[deeper].name);
        table += &format!("; past k = {k}: {name} (`{}` sums in f16, checked at k = {k})", VARIANTS[best].name);
        (k, deeper)
    });
    let entry = Tuned { variant: best, times: table, shallow };
    let choice = entry.for_depth(call.mkn[1]);
    lock(&state.tuned).insert(class, entry);
    Some(choice)
}

/// The variants the second round times, from the first round's `times` (fastest first): the
/// [`FINALISTS`] fastest, and the fastest of each block shape of 128 rows (too few
/// workgroups to fill a large GPU at 1024, they may still win at the real size).
fn finalists(times: &[(Duration, usize)], enc: Enc, input: bool) -> Vec<usize> {
    let block = |variant| Kernel { variant, enc, input, checked: false }.block();
    let mut out: Vec<usize> = Vec::new();
    for (i, &(_, v)) in times.iter().enumerate() {
        let shape = block(v);
        if i < FINALISTS || (shape[0] >= 128 && out.iter().all(|&w| block(w) != shape)) {
            out.push(v);
        }
    }
    out
}

/// The fastest of a warm-up run and up to three timed runs of `kernel` on the leading
/// `mkn` block of `call`'s first batch entry (one when a run exceeds 250 ms).
fn time(call: &Call<'_>, kernel: Kernel, pipeline: &Pipeline, out: &Buffer, mkn: [usize; 3]) -> Duration {
    let timed = || {
        let t = Instant::now();
        call.run(kernel, pipeline, out, Some(mkn));
        wait(call.ctx, out);
        t.elapsed()
    };
    timed(); // warm-up: the pipeline is built on first use
    let mut best = timed();
    for _ in 0..2 {
        if best > Duration::from_millis(250) {
            break;
        }
        best = best.min(timed());
    }
    best
}

fn ms(t: Duration) -> String {
    format!("{:.3} ms", t.as_secs_f64() * 1e3)
}

/// The first `count` elements of `out` (a tuning wait).
fn read(call: &Call<'_>, out: &Buffer, count: usize) -> Vec<f64> {
    state(call.ctx).tuning_waits.fetch_add(1, Ordering::Relaxed);
    let size = if call.enc == Enc::F64 {
        8
    } else if call.enc == Enc::F32 {
        4
    } else {
        2
    };
    let bytes = call.ctx.download(out, count * size);
    let enc = call.enc;
    bytes
        .chunks_exact(size)
        .take(count)
        .map(|b| match enc {
            Enc::F64 => f64::from_le_bytes(b.try_into().expect("8 bytes")),
            Enc::F32 => f64::from(f32::from_le_bytes(b.try_into().expect("4 bytes"))),
            Enc::F16 | Enc::F16Packed => half::f16::from_le_bytes([b[0], b[1]]).to_f64(),
            Enc::BF16 => half::bf16::from_le_bytes([b[0], b[1]]).to_f64(),
        })
        .collect()
}

/// Whether a candidate's product `got` matches the general variant's `want` within what
/// summation order (and, for 16-bit types, f16 sums on matrix units) explains: every
/// element finite and within `tol * max |want|`. A check against kernels a driver
/// miscompiles, or that were never run on this kind of adapter, before one may win. A
/// `want` with non-finite values says nothing and is refused ([`tuned`] does not compare
/// on one).
fn agrees(enc: Enc, want: &[f64], got: &[f64]) -> Result<(), String> {
    if let Some(i) = want.iter().position(|w| !w.is_finite()) {
        return Err(format!("the general variant's element {i} is {}: nothing to compare", want[i]));
    }
    let tol = match enc {
        Enc::F64 => 1e-9,
        Enc::F32 => 1e-4,
        Enc::F16 | Enc::F16Packed | Enc::BF16 => 5e-2,
    };
    let scale = want.iter().fold(f64::MIN_POSITIVE, |m, w| m.max(w.abs()));
    let (i, err) = want
        .iter()
        .zip(got)
        .map(|(w, g)| if g.is_finite() { (w - g).abs() } else { f64::INFINITY })
        .enumerate()
        .fold((0, 0.0), |(bi, be), (i, e)| if e > be { (i, e) } else { (bi, be) });
    if err <= tol * scale {
        Ok(())
    } else {
        Err(format!("element {i} is {}, the general variant's {} (largest {scale:e})", got[i], want[i]))
    }
}

/// Sets the first `cells` elements of `out` to NaN (all bits set, in every encoding), in
/// order with the recorded kernels.
fn poison(call: &Call<'_>, out: &Buffer, cells: usize) {
    let size = match call.enc {
        Enc::F64 => 8,
        Enc::F32 => 4,
        Enc::F16 | Enc::F16Packed | Enc::BF16 => 2,
    };
    call.ctx.write(out, &vec![0xff; cells * size]);
}

/// Waits for the kernels queued before, by reading one word of `out` back.
fn wait(ctx: &'static Ctx, out: &Buffer) {
    state(ctx).tuning_waits.fetch_add(1, Ordering::Relaxed);
    ctx.download(out, 4);
}

/// What [`crate::gpu::gemm_report`] shows of `ctx`: the variants with their refusals, the
/// tuning table, the latest product and the tuning waits (the fields of
/// `crate::gpu::GemmReport`, which the backend does not import).
pub(crate) type Report = (Vec<(String, Option<String>)>, Vec<(String, String)>, Option<String>, u64);

/// See [`Report`].
pub(crate) fn report(ctx: &'static Ctx) -> Report {
    let state = self::state(ctx);
    let compile: Vec<(usize, String)> =
        lock(&state.kernels).iter().filter_map(|(k, r)| r.clone().err().map(|e| (k.variant, e))).collect();
    let variants = VARIANTS
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let mut why: Vec<String> = state.caps.refusal(v).into_iter().collect();
            why.extend(compile.iter().filter(|(w, _)| *w == i).map(|(_, e)| e.clone()));
            (v.name.to_string(), (!why.is_empty()).then(|| why.join("; ")))
        })
        .collect();
    let tuned = lock(&state.tuned)
        .iter()
        .map(|(class, entry)| (class.to_string(), format!("{} ({})", VARIANTS[entry.variant].name, entry.times)))
        .collect();
    (variants, tuned, lock(&state.last).clone(), state.tuning_waits.load(Ordering::Relaxed))
}

#[cfg(test)]
#[path = "gemm_tune_tests.rs"]
pub(crate) mod tests;
