//! Resampling of the spatial dims (`torch.nn.functional.interpolate`): nearest,
//! nearest-exact, linear, bilinear, bicubic and area.
//!
//! Every mode is separable, so each spatial dim is resampled on its own: the nearest modes
//! pick one source row per output row (one `index_select`), linear blends two
//! (`w0 * x[i0] + w1 * x[i1]`, two `index_select`s and a weighted sum), bicubic four
//! (PyTorch's cubic convolution, `A = -0.75`, with the border rows repeated), and area
//! averages each output row's window (PyTorch's adaptive average pooling: the taps past a
//! window's end are zeroed, not weighted by zero, so an infinity elsewhere in the row does
//! not reach it). The source indices
//! and weights follow PyTorch's CPU kernels step for step (their `float` arithmetic for
//! `f32` inputs), so outputs match PyTorch's; the backward and every device come with the
//! composed ops (the gradient of a gather is an `index_add`).

use super::check_float;
use crate::dtype::DType;
use crate::tensor::Tensor;

/// The resampling rule of [`interpolate`] (PyTorch's `mode` strings).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InterpolateMode {
    /// `'nearest'`: output position `o` copies input `floor(o * in / out)` (PyTorch's
    /// legacy nearest, not `'nearest-exact'`); any number of spatial dims.
    #[default]
    Nearest,
    /// `'linear'`: linear interpolation of `[N, C, L]`.
    Linear,
    /// `'bilinear'`: bilinear interpolation of `[N, C, H, W]`.
    Bilinear,
    /// `'nearest-exact'`: output position `o` copies input `floor((o + 0.5) * in / out)`
    /// (the pixel whose centre is nearest, as PIL and scikit-image pick); any number of
    /// spatial dims.
    NearestExact,
    /// `'bicubic'`: bicubic interpolation of `[N, C, H, W]` (cubic convolution with
    /// `A = -0.75`, as PyTorch; values may overshoot the input's range).
    Bicubic,
    /// `'area'`: each output element is the mean of its window of the input (PyTorch's
    /// adaptive average pooling to the output size); any number of spatial dims.
    Area,
}

impl InterpolateMode {
    /// PyTorch's name of the mode.
    pub fn as_str(self) -> &'static str {
        match self {
            InterpolateMode::Nearest => "nearest",
            InterpolateMode::Linear => "linear",
            InterpolateMode::Bilinear => "bilinear",
            InterpolateMode::NearestExact => "nearest-exact",
            InterpolateMode::Bicubic => "bicubic",
            InterpolateMode::Area => "area",
        }
    }

    /// Whether `align_corners` applies: the interpolating modes (linear, bilinear, bicubic).
    pub fn takes_align_corners(self) -> bool {
        matches!(self, InterpolateMode::Linear | InterpolateMode::Bilinear | InterpolateMode::Bicubic)
    }

    /// The input rank the mode needs (`None`: any rank from 3).
    fn rank(self) -> Option<usize> {
        match self {
            InterpolateMode::Nearest | InterpolateMode::NearestExact | InterpolateMode::Area => None,
            InterpolateMode::Linear => Some(3),
            InterpolateMode::Bilinear | InterpolateMode::Bicubic => Some(4),
        }
    }
}

impl std::fmt::Display for InterpolateMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The output of [`interpolate`]: PyTorch's `size` or `scale_factor` (exactly one of them).
/// One value applies to every spatial dim; otherwise one per spatial dim.
#[derive(Clone, Debug, PartialEq)]
pub enum InterpolateSize {
    /// The output's spatial size.
    Size(Vec<usize>),
    /// Multipliers of the input's spatial size: the output size is
    /// `floor(input_size * scale_factor)`, and the kernels use `1 / scale_factor` as
    /// PyTorch does (with `recompute_scale_factor` left unset).
    ScaleFactor(Vec<f64>),
}

/// Resamples the spatial dims of `x: [N, C, *spatial]`, as
/// `torch.nn.functional.interpolate(x, size | scale_factor, mode, align_corners)`.
///
/// For each spatial dim of input size `n` and output size `m`, with
/// `scale = 1 / scale_factor` when a scale factor was given, else `n / m`:
/// - [`Nearest`](InterpolateMode::Nearest): `out[o] = x[min(floor(o * scale), n - 1)]`;
/// - [`Linear`](InterpolateMode::Linear) on `[N, C, L]` and
///   [`Bilinear`](InterpolateMode::Bilinear) on `[N, C, H, W]` (each dim in turn): source
///   position `s = o * (n - 1) / (m - 1)` with `align_corners`, else
///   `s = max((o + 0.5) * scale - 0.5, 0)`; with `i = floor(s)` and `t = s - i`,
///   `out[o] = (1 - t) * x[i] + t * x[min(i + 1, n - 1)]`.
///
/// `align_corners` is `None` for nearest (PyTorch rejects it there) and defaults to
/// `false` for the linear modes.
///
/// ```
/// use nn_core::functional::interpolate;
/// use nn_core::ops::{InterpolateMode, InterpolateSize};
/// use nn_core::Tensor;
/// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[1, 1, 2, 2]);
/// let up = interpolate(&x, InterpolateSize::ScaleFactor(vec![2.0]), InterpolateMode::Nearest, None);
/// assert_eq!(up.shape(), &[1, 1, 4, 4]);
/// assert_eq!(up.to_vec()[..4], [1.0, 1.0, 2.0, 2.0]);
/// let line = Tensor::from_vec(vec![0.0, 3.0], &[1, 1, 2]);
/// let y = interpolate(&line, InterpolateSize::Size(vec![4]), InterpolateMode::Linear, Some(true));
/// assert_eq!(y.to_vec(), vec![0.0, 1.0, 2.0, 3.0]);
/// ```
///
/// # Panics
/// When the input rank does not suit the mode (`[N, C, L]` for linear, `[N, C, H, W]` for
/// bilinear, at least 3 dims for nearest), when `size` or `scale_factor` has neither one
/// value nor one per spatial dim, when a scale factor is not positive and finite or gives
/// an empty output, or when `align_corners` is set for nearest.
#[track_caller]
pub fn interpolate(x: &Tensor, size: InterpolateSize, mode: InterpolateMode, align_corners: Option<bool>) -> Tensor {
    const OP: &str = crate::names::INTERPOLATE;
    check_float(OP, x);
    // Built from public ops, without a trace frame of its own: its parts are not cast.
    let again = |c: &[Option<&Tensor>]| interpolate(c[0].expect("present"), size.clone(), mode, align_corners);
    let _op = crate::autograd::entry::op_entry!(untraced OP, [Some(x)], again = again);
    let rank = x.rank();
    match mode.rank() {
        Some(r) if r != rank => panic!(
            "{OP}: got {rank}D input (shape {:?}), but {mode} mode needs {r}D input ([N, C, {}])",
            x.shape(),
            if r == 3 { "L" } else { "H, W" }
        ),
        None if rank < 3 => {
            panic!("{OP}: expected input [N, C, *spatial] with at least one spatial dim, got shape {:?}", x.shape())
        }
        _ => {}
    }
    if !mode.takes_align_corners() && align_corners.is_some() {
        panic!(
            "{OP}: align_corners option can only be set with the interpolating modes: linear | bilinear | bicubic (got mode {mode})"
        );
    }
    let align = align_corners.unwrap_or(false);
    let spatial = &x.shape()[2..];
    let k = spatial.len();
    let per_dim = |len: usize, what: &str| {
        if len != 1 && len != k {
            panic!(
                "{OP}: input and output must have the same number of spatial dimensions, but got input with spatial dimensions of {spatial:?} (shape {:?}) and {what} of length {len}",
                x.shape()
            );
        }
    };
    // (output size, the scale factor the kernels see) per spatial dim.
    let plan: Vec<(usize, Option<f64>)> = match &size {
        InterpolateSize::Size(s) => {
            per_dim(s.len(), &format!("output size {s:?}"));
            (0..k).map(|d| (s[d.min(s.len() - 1)], None)).collect()
        }
        InterpolateSize::ScaleFactor(f) => {
            per_dim(f.len(), &format!("scale_factor {f:?}"));
            (0..k)
                .map(|d| {
                    let sf = f[d.min(f.len() - 1)];
                    if !(sf.is_finite() && sf > 0.0) {
                        panic!("{OP}: scale_factor must be positive and finite, got {f:?}");
                    }
                    ((spatial[d] as f64 * sf).floor() as usize, Some(sf))
                })
                .collect()
        }
    };
    for (d, &(m, _)) in plan.iter().enumerate() {
        if (m == 0) != (spatial[d] == 0) {
            panic!(
                "{OP}: input shape {:?} and {size:?} give an empty output size {:?}; the output must be non-empty",
                x.shape(),
                plan.iter().map(|p| p.0).collect::<Vec<_>>()
            );
        }
    }
    let f32_math = x.dtype() != DType::F64;
    let mut y = x.clone();
    for (d, &(m, scale)) in plan.iter().enumerate() {
        let (dim, n) = (d + 2, spatial[d]);
        if n == m && matches!(mode, InterpolateMode::Nearest | InterpolateMode::NearestExact | InterpolateMode::Area) {
            continue;
        }
        y = match mode {
            InterpolateMode::Nearest | InterpolateMode::NearestExact => {
                let index = nearest_indices(n, m, scale, mode == InterpolateMode::NearestExact);
                y.index_select(dim, &Tensor::from_vec_i64(index, &[m]).to_device(x.device()))
            }
            InterpolateMode::Linear | InterpolateMode::Bilinear => linear_along(&y, dim, m, scale, align, f32_math),
            InterpolateMode::Bicubic => cubic_along(&y, dim, m, scale, align, f32_math),
            InterpolateMode::Area => area_along(&y, dim, m),
        };
    }
    y
}

/// PyTorch's `compute_scales_value`: `1 / scale_factor` when one was given, else `in / out`.
fn scale_value(scale: Option<f64>, n: usize, m: usize) -> f64 {
    match scale {
        Some(s) if s > 0.0 => 1.0 / s,
        _ => n as f64 / m as f64,
    }
}

/// `min(floor(o * scale), n - 1)` in `f32` (PyTorch's `nearest_idx`), or for
/// nearest-exact `min(floor((o + 0.5) * scale), n - 1)`
/// (`nearest_neighbor_exact_compute_source_index`).
fn nearest_indices(n: usize, m: usize, scale: Option<f64>, exact: bool) -> Vec<i64> {
    let s = scale_value(scale, n, m) as f32;
    (0..m)
        .map(|o| {
            if exact {
                (((o as f32 + 0.5) * s).floor() as i64).min(n as i64 - 1)
            } else if m == n {
                o as i64
            } else if m == 2 * n {
                (o >> 1) as i64
            } else {
                ((o as f32 * s).floor() as i64).min(n as i64 - 1)
            }
        })
        .collect()
}

/// Source indices `i0`, `i1` and weights `w0`, `w1` of linear interpolation from `n` to
/// `m` points (PyTorch's `compute_indices_weights_linear`), in `f32` or `f64` arithmetic.
fn linear_weights(
    n: usize,
    m: usize,
    scale: Option<f64>,
    align: bool,
    f32_math: bool,
) -> (Vec<i64>, Vec<i64>, Vec<f64>) {
    let round = |v: f64| if f32_math { v as f32 as f64 } else { v };
    let ratio = if align {
        if m > 1 {
            round(round((n - 1) as f64) / round((m - 1) as f64))
        } else {
            0.0
        }
    } else {
        round(scale_value(scale, n, m))
    };
    let (mut i0, mut i1, mut lam) = (Vec::with_capacity(m), Vec::with_capacity(m), Vec::with_capacity(m));
    for o in 0..m {
        let src =
            if align { round(ratio * o as f64) } else { round(round(ratio * round(o as f64 + 0.5)) - 0.5).max(0.0) };
        let i = (src.floor() as i64).min(n as i64 - 1);
        let t = round(src - i as f64).clamp(0.0, 1.0);
        i0.push(i);
        i1.push(if i < n as i64 - 1 { i + 1 } else { i });
        lam.push(t);
    }
    (i0, i1, lam)
}

/// Linear resampling of dim `dim` to `m` points: `w0 * x[i0] + w1 * x[i1]`.
fn linear_along(x: &Tensor, dim: usize, m: usize, scale: Option<f64>, align: bool, f32_math: bool) -> Tensor {
    let n = x.shape()[dim];
    let (i0, i1, lam) = linear_weights(n, m, scale, align, f32_math);
    let dev = x.device();
    let mut wshape = vec![1; x.rank() - dim];
    wshape[0] = m;
    let weight = |v: Vec<f64>| Tensor::from_vec_f64(v, &wshape).to_dtype(x.dtype()).to_device(dev);
    let w0 = weight(lam.iter().map(|t| 1.0 - t).collect());
    let w1 = weight(lam);
    let a = x.index_select(dim, &Tensor::from_vec_i64(i0, &[m]).to_device(dev));
    let b = x.index_select(dim, &Tensor::from_vec_i64(i1, &[m]).to_device(dev));
    a * w0 + b * w1
}

/// Bicubic resampling of dim `dim` to `m` points (PyTorch's `upsample_bicubic2d`: source
/// `scale * (o + 0.5) - 0.5`, unclamped, or `scale * o` with `align`; four taps at
/// `floor(src) - 1 ..= floor(src) + 2`, clamped to the border, with the cubic convolution
/// weights of `t = src - floor(src)`).
fn cubic_along(x: &Tensor, dim: usize, m: usize, scale: Option<f64>, align: bool, f32_math: bool) -> Tensor {
    const A: f64 = -0.75;
    let n = x.shape()[dim];
    let round = |v: f64| if f32_math { v as f32 as f64 } else { v };
    let ratio = match (align, m > 1) {
        (true, true) => round(round((n - 1) as f64) / round((m - 1) as f64)),
        (true, false) => 0.0,
        (false, _) => round(scale_value(scale, n, m)),
    };
    let near = |t: f64| round(round(round(round(A + 2.0) * t - round(A + 3.0)) * t) * t + 1.0);
    let far = |t: f64| round(round(round(round(round(A * t) - 5.0 * A) * t) + 8.0 * A) * t - 4.0 * A);
    let (mut index, mut weight) = ([vec![], vec![], vec![], vec![]], [vec![], vec![], vec![], vec![]]);
    for o in 0..m {
        let src = if align { round(ratio * o as f64) } else { round(round(ratio * round(o as f64 + 0.5)) - 0.5) };
        let i = src.floor();
        let t = round(src - i);
        let w = [far(round(t + 1.0)), near(t), near(round(1.0 - t)), far(round(2.0 - t))];
        for k in 0..4 {
            index[k].push((i as i64 - 1 + k as i64).clamp(0, n as i64 - 1));
            weight[k].push(w[k]);
        }
    }
    let dev = x.device();
    let mut wshape = vec![1; x.rank() - dim];
    wshape[0] = m;
    let taps = index.into_iter().zip(weight).map(|(i, w)| {
        let w = Tensor::from_vec_f64(w, &wshape).to_dtype(x.dtype()).to_device(dev);
        x.index_select(dim, &Tensor::from_vec_i64(i, &[m]).to_device(dev)) * w
    });
    taps.reduce(|a, b| a + b).expect("four taps")
}

/// Area resampling of dim `dim` to `m` points: output `o` is the mean of input rows
/// `floor(o * n / m) .. ceil((o + 1) * n / m)` (PyTorch's `start_index`/`end_index` of
/// adaptive average pooling).
fn area_along(x: &Tensor, dim: usize, m: usize) -> Tensor {
    let n = x.shape()[dim];
    let windows: Vec<(usize, usize)> = (0..m).map(|o| (o * n / m, ((o + 1) * n).div_ceil(m))).collect();
    let widest = windows.iter().map(|(s, e)| e - s).max().unwrap_or(0);
    let dev = x.device();
    let mut wshape = vec![1; x.rank() - dim];
    wshape[0] = m;
    let mut sum: Option<Tensor> = None;
    for k in 0..widest {
        let index: Vec<i64> = windows.iter().map(|&(s, e)| (s + k).min(e - 1) as i64).collect();
        let tap = x.index_select(dim, &Tensor::from_vec_i64(index, &[m]).to_device(dev));
        let outside: Vec<bool> = windows.iter().map(|&(s, e)| s + k >= e).collect();
        let tap = if outside.iter().any(|&o| o) {
            tap.masked_fill(&Tensor::from_vec_bool(outside, &wshape).to_device(dev), 0.0)
        } else {
            tap
        };
        sum = Some(match sum {
            Some(s) => s + tap,
            None => tap,
        });
    }
    let count: Vec<f64> = windows.iter().map(|(s, e)| (e - s) as f64).collect();
    sum.expect("a non-empty window") / Tensor::from_vec_f64(count, &wshape).to_dtype(x.dtype()).to_device(dev)
}

#[cfg(test)]
mod tests {
    use super::interpolate;
    use super::InterpolateMode::{self, *};
    use super::InterpolateSize::{self, *};
    use crate::testing::gradcheck;
    use crate::testing::support::{assert_close64, check_noncontig, grad, leaf, t64};
    use crate::{DType, Device, Tensor};

    fn ramp(shape: &[usize]) -> Tensor {
        let n: usize = shape.iter().product();
        t64(&(0..n).map(|v| v as f64).collect::<Vec<_>>(), shape)
    }

    fn run(x: &Tensor, size: InterpolateSize, mode: InterpolateMode, align: Option<bool>) -> Vec<f64> {
        interpolate(x, size, mode, align).to_vec_f64()
    }

    /// Values from PyTorch 2.15's `F.interpolate` on these inputs (float64).
    #[test]
    fn area_nearest_exact_and_bicubic_match_torch() {
        let x = t64(&[1.0, 4.0, 2.0, 8.0, -1.0], &[1, 1, 5]);
        assert_close64(&run(&x, Size(vec![3]), Area, None), &[2.5, 4.666666666666667, 3.5], 1e-15);
        assert_eq!(run(&x, Size(vec![7]), NearestExact, None), [1.0, 4.0, 4.0, 2.0, 8.0, 8.0, -1.0]);
        assert_eq!(run(&x, Size(vec![3]), NearestExact, None), [1.0, 2.0, -1.0]);
        // An infinity stays in its own window.
        let z = t64(&[1.0, f64::INFINITY, 2.0, 3.0], &[1, 1, 4]);
        assert_eq!(run(&z, Size(vec![2]), Area, None), [f64::INFINITY, 2.5]);
        let y = t64(&[1.0, 4.0, 2.0, 8.0, -1.0, 0.5], &[1, 1, 2, 3]);
        let torch = [
            0.10226101345486284,
            3.230712042914497,
            4.04787360297309,
            1.9648462931315107,
            4.71533203125,
            2.6085205078125004,
            1.0803222656250004,
            1.2320556640625002,
            9.328403049045143,
            1.9863289727105033,
            -1.887229071723092,
            0.49926503499348934,
        ];
        assert_close64(&run(&y, Size(vec![3, 4]), Bicubic, None), &torch, 1e-13);
        let torch = [
            1.0,
            3.2777777777777777,
            3.703703703703704,
            2.0,
            4.5,
            2.4722222222222214,
            1.087962962962963,
            1.25,
            8.0,
            1.6666666666666654,
            -1.5277777777777781,
            0.5,
        ];
        assert_close64(&run(&y, Size(vec![3, 4]), Bicubic, Some(true)), &torch, 1e-13);
    }

    #[test]
    fn area_nearest_exact_and_bicubic_gradcheck() {
        let y = t64(&[1.0, 4.0, 2.0, 8.0, -1.0, 0.5, 0.3, -2.0, 1.5, 0.7, 2.2, -0.4], &[1, 2, 2, 3]);
        for (mode, size, align) in [
            (Area, Size(vec![1, 2]), None),
            (Area, Size(vec![3, 5]), None),
            (NearestExact, ScaleFactor(vec![1.5]), None),
            (Bicubic, Size(vec![3, 4]), None),
            (Bicubic, Size(vec![1, 2]), Some(true)),
        ] {
            gradcheck(|t| interpolate(&t[0], size.clone(), mode, align), std::slice::from_ref(&y)).unwrap();
        }
    }

    #[test]
    fn nearest_matches_torch() {
        // F.interpolate(torch.arange(3.).view(1, 1, 3), size=5) -> [0, 0, 1, 1, 2]
        assert_eq!(run(&ramp(&[1, 1, 3]), Size(vec![5]), Nearest, None), vec![0., 0., 1., 1., 2.]);
        // size=2 from 5: floor(o * 2.5) -> [0, 2]
        assert_eq!(run(&ramp(&[1, 1, 5]), Size(vec![2]), Nearest, None), vec![0., 2.]);
        // scale_factor=1.5 from 3: out 4, floor(o / 1.5) -> [0, 0, 1, 2]
        assert_eq!(run(&ramp(&[1, 1, 3]), ScaleFactor(vec![1.5]), Nearest, None), vec![0., 0., 1., 2.]);
        let y = interpolate(&ramp(&[1, 1, 2, 3]), ScaleFactor(vec![2.0, 1.0]), Nearest, None);
        assert_eq!(y.shape(), &[1, 1, 4, 3]);
        assert_eq!(y.to_vec_f64(), vec![0., 1., 2., 0., 1., 2., 3., 4., 5., 3., 4., 5.]);
    }

    #[test]
    fn output_size_rounds_down_as_torch() {
        // floor(5 * 1.7) = 8, floor(3 * 0.5) = 1
        let y = interpolate(&ramp(&[1, 2, 5, 3]), ScaleFactor(vec![1.7, 0.5]), Bilinear, None);
        assert_eq!(y.shape(), &[1, 2, 8, 1]);
    }

    #[test]
    fn linear_matches_torch() {
        let x = t64(&[1.0, 4.0, 2.0], &[1, 1, 3]);
        // F.interpolate(x, size=5, mode='linear', align_corners=True) -> [1, 2.5, 4, 3, 2]
        assert_close64(&run(&x, Size(vec![5]), Linear, Some(true)), &[1.0, 2.5, 4.0, 3.0, 2.0], 1e-12);
        // align_corners=False: src = max((o + 0.5) * 0.6 - 0.5, 0) = [0, 0.4, 1, 1.6, 2.2]
        let expect = [1.0, 2.2, 4.0, 2.8, 2.0];
        assert_close64(&run(&x, Size(vec![5]), Linear, Some(false)), &expect, 1e-12);
        assert_close64(&run(&x, Size(vec![5]), Linear, None), &expect, 1e-12);
        // Downsampling with a scale factor uses 1 / scale_factor: size 1, src = 0.5 * 2 - 0.5.
        assert_close64(&run(&t64(&[1.0, 3.0], &[1, 1, 2]), ScaleFactor(vec![0.5]), Linear, None), &[2.0], 1e-12);
    }

    #[test]
    fn bilinear_matches_torch() {
        // F.interpolate(torch.arange(4.).view(1, 1, 2, 2), size=(3, 3), mode='bilinear', align_corners=True)
        let x = ramp(&[1, 1, 2, 2]);
        let y = run(&x, Size(vec![3]), Bilinear, Some(true));
        assert_close64(&y, &[0.0, 0.5, 1.0, 1.0, 1.5, 2.0, 2.0, 2.5, 3.0], 1e-12);
        // ... scale_factor=2, align_corners=False
        let y = run(&x, ScaleFactor(vec![2.0]), Bilinear, Some(false));
        let row = |a: f64| [a, a + 0.25, a + 0.75, a + 1.0];
        let expect = [row(0.0), row(0.5), row(1.5), row(2.0)].concat();
        assert_close64(&y, &expect, 1e-12);
    }

    #[test]
    fn backward_and_gradcheck() {
        let x = leaf(&[1.0, 4.0, 2.0], &[1, 1, 3]);
        let y = interpolate(&x, Size(vec![5]), Linear, Some(true));
        (&y * &t64(&[1.0, 2.0, 3.0, 4.0, 5.0], &[1, 1, 5])).sum().backward();
        // y = [x0, (x0 + x1) / 2, x1, (x1 + x2) / 2, x2]
        assert_close64(&grad(&x), &[2.0, 1.0 + 3.0 + 2.0, 2.0 + 5.0], 1e-12);
        let x = t64(&[0.3, -1.2, 2.0, -0.7, 1.1, 0.4, 0.9, -0.2, 1.6, -1.4, 0.05, 0.8], &[1, 2, 2, 3]);
        let cases: [(InterpolateSize, InterpolateMode, Option<bool>); 5] = [
            (Size(vec![3, 5]), Bilinear, Some(true)),
            (ScaleFactor(vec![1.5, 0.7]), Bilinear, Some(false)),
            (Size(vec![5, 2]), Nearest, None),
            (Size(vec![1, 1]), Bilinear, Some(true)),
            (ScaleFactor(vec![2.0]), Nearest, None),
        ];
        for (size, mode, align) in cases {
            gradcheck(|t| interpolate(&t[0], size.clone(), mode, align).exp(), std::slice::from_ref(&x)).unwrap();
            check_noncontig(|t| interpolate(&t[0], size.clone(), mode, align), std::slice::from_ref(&x));
        }
        gradcheck(|t| interpolate(&t[0], Size(vec![7]), Linear, None).tanh(), &[x.reshape(&[2, 2, 3])]).unwrap();
    }

    #[test]
    fn f32_inputs_stay_f32_and_meta_gives_shapes() {
        let x = Tensor::from_vec(vec![1.0, 2.0], &[1, 1, 2]);
        let y = interpolate(&x, Size(vec![3]), Linear, Some(true));
        assert_eq!((y.dtype(), y.to_vec()), (DType::F32, vec![1.0, 1.5, 2.0]));
        let m = Tensor::full_on(&[2, 3, 4, 5], 0.0, DType::F32, Device::Meta);
        assert_eq!(interpolate(&m, ScaleFactor(vec![2.0, 3.0]), Bilinear, None).shape(), &[2, 3, 8, 15]);
        assert_eq!(interpolate(&m.reshape(&[2, 3, 4, 5, 1]), Size(vec![2]), Nearest, None).shape(), &[2, 3, 2, 2, 2]);
    }

    #[test]
    #[should_panic(expected = "interpolate: got 4D input (shape [1, 1, 2, 2]), but linear mode needs 3D input")]
    fn linear_of_4d_panics() {
        interpolate(&ramp(&[1, 1, 2, 2]), Size(vec![3]), Linear, None);
    }

    #[test]
    #[should_panic(expected = "interpolate: align_corners option can only be set with the interpolating modes")]
    fn align_corners_with_nearest_panics() {
        interpolate(&ramp(&[1, 1, 2]), Size(vec![3]), Nearest, Some(false));
    }

    #[test]
    #[should_panic(
        expected = "interpolate: input and output must have the same number of spatial dimensions, but got input with spatial dimensions of [2, 2] (shape [1, 1, 2, 2]) and output size [1, 2, 3] of length 3"
    )]
    fn wrong_size_length_panics() {
        interpolate(&ramp(&[1, 1, 2, 2]), Size(vec![1, 2, 3]), Bilinear, None);
    }

    #[test]
    #[should_panic(expected = "interpolate: scale_factor must be positive and finite, got [-1.0]")]
    fn negative_scale_panics() {
        interpolate(&ramp(&[1, 1, 2, 2]), ScaleFactor(vec![-1.0]), Bilinear, None);
    }

    #[test]
    #[should_panic(expected = "give an empty output size [0]")]
    fn empty_output_panics() {
        interpolate(&ramp(&[1, 1, 3]), ScaleFactor(vec![0.2]), Nearest, None);
    }
}
