//! 3-D convolution and pooling (`conv3d`, `max_pool3d`, `avg_pool3d`), composed of the 2-D
//! kernels, so that autograd, every dtype and every device come with them.
//!
//! - `conv3d` is a sum over the kernel's depth taps: tap `kd` convolves (in 2-D, batched over
//!   the output depths) the input planes `kd * dilation + t * stride` of the depth-padded
//!   input with the weight's slice `kd`. `kD` 2-D convolutions of `N * Do` planes each: the
//!   same multiply-adds as a direct 3-D convolution.
//! - The pools run in two passes: a 2-D pool over `(H, W)` of every depth plane, then a pool
//!   over depth (a `1 x kD` window). Max pooling keeps PyTorch's choice of element exactly:
//!   PyTorch's kernel scans a window in `(d, h, w)` order and keeps the first maximum (the
//!   last NaN), and so do the two passes, the first within each plane and the second across
//!   the planes' winners, so gradients go where PyTorch sends them, ties and NaN included.
//!   An average of per-plane averages is the window's average: the count PyTorch divides by,
//!   with or without the padding, is a product of one factor per axis.

use crate::backend::{Conv2dConfig, Pool2dConfig};
use crate::tensor::Tensor;

/// Options of [`Tensor::conv3d`], each `(depth, height, width)`, with PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv3dConfig {
    /// Step between output positions.
    pub stride: (usize, usize, usize),
    /// Zeros added on both sides of each axis.
    pub padding: (usize, usize, usize),
    /// Spacing between kernel taps.
    pub dilation: (usize, usize, usize),
    /// Number of channel groups; input and output channels must both divide by it.
    pub groups: usize,
}

impl Default for Conv3dConfig {
    fn default() -> Self {
        Conv3dConfig { stride: (1, 1, 1), padding: (0, 0, 0), dilation: (1, 1, 1), groups: 1 }
    }
}

/// Options of [`Tensor::max_pool3d`] and [`Tensor::avg_pool3d`], each `(depth, height,
/// width)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pool3dConfig {
    /// Window size.
    pub kernel: (usize, usize, usize),
    /// Step between windows; PyTorch's default is the kernel size.
    pub stride: (usize, usize, usize),
    /// Implicit padding on both sides (`-inf` for max, zeros for average).
    pub padding: (usize, usize, usize),
    /// Spacing between window taps (max pooling only).
    pub dilation: (usize, usize, usize),
    /// Round the output size up instead of down.
    pub ceil_mode: bool,
}

impl Pool3dConfig {
    /// A `k x k x k` window with stride `k` and no padding (PyTorch's defaults).
    pub fn new(kernel: usize) -> Self {
        Pool3dConfig {
            kernel: (kernel, kernel, kernel),
            stride: (kernel, kernel, kernel),
            padding: (0, 0, 0),
            dilation: (1, 1, 1),
            ceil_mode: false,
        }
    }

    /// The `(H, W)` pass.
    fn planes(&self) -> Pool2dConfig {
        Pool2dConfig {
            kernel: (self.kernel.1, self.kernel.2),
            stride: (self.stride.1, self.stride.2),
            padding: (self.padding.1, self.padding.2),
            dilation: (self.dilation.1, self.dilation.2),
            ceil_mode: self.ceil_mode,
        }
    }

    /// The depth pass, as a `1 x kD` window over `[.., 1, D]`.
    fn depth(&self) -> Pool2dConfig {
        Pool2dConfig {
            kernel: (1, self.kernel.0),
            stride: (1, self.stride.0),
            padding: (0, self.padding.0),
            dilation: (1, self.dilation.0),
            ceil_mode: self.ceil_mode,
        }
    }

    #[track_caller]
    fn check(&self, op: &str) {
        let (k, s, d) = (self.kernel, self.stride, self.dilation);
        if [k.0, k.1, k.2, s.0, s.1, s.2, d.0, d.1, d.2].contains(&0) {
            panic!("{op}: kernel, stride and dilation must be positive, got {self:?}");
        }
        let p = self.padding;
        if 2 * p.0 > k.0 || 2 * p.1 > k.1 || 2 * p.2 > k.2 {
            panic!("{op}: padding {p:?} should be at most half of the kernel size {k:?}");
        }
    }
}

/// The batched 5-D form of `x` (`[C, D, H, W]` gains a batch of one), and whether it was
/// unbatched.
#[track_caller]
fn batched(op: &str, x: &Tensor) -> (Tensor, bool) {
    match x.rank() {
        5 => (x.clone(), false),
        4 => (x.unsqueeze(0), true),
        _ => panic!(
            "{op}: expected a 5-D input [N, C, D, H, W] (or 4-D [C, D, H, W], unbatched), got shape {:?}",
            x.shape()
        ),
    }
}

/// Two-pass pooling: `plane` over `(H, W)` of every depth plane, then `depth` over the
/// depth axis.
fn two_pass(x: &Tensor, pass: impl Fn(&Tensor, Pool2dConfig) -> Tensor, o: &Pool3dConfig) -> Tensor {
    let s = x.shape().to_vec();
    let (n, c, d, h, w) = (s[0], s[1], s[2], s[3], s[4]);
    let planes = pass(&x.reshape(&[n * c * d, h, w]), o.planes());
    let (ho, wo) = (planes.shape()[1], planes.shape()[2]);
    // [N*C, D, Ho*Wo] -> [N*C*Ho*Wo, 1, D]: depth last, each column a plane of its own.
    let columns = planes.reshape(&[n * c, d, ho * wo]).transpose(1, 2).reshape(&[n * c * ho * wo, 1, d]);
    let pooled = pass(&columns, o.depth());
    let dout = pooled.shape()[2];
    pooled.reshape(&[n * c, ho * wo, dout]).transpose(1, 2).reshape(&[n, c, dout, ho, wo])
}

/// Checks a 3-D convolution's operands as PyTorch does, naming the caller's shapes (the 2-D
/// convolutions it is made of would name their own), and returns the output depth and the
/// kernel depth.
#[track_caller]
fn conv3d_geometry(x: &Tensor, w: &Tensor, bias: Option<&Tensor>, o: &Conv3dConfig, shown: &[usize]) -> (usize, usize) {
    const OP: &str = crate::names::CONV3D;
    if w.rank() != 5 {
        panic!(
            "{OP}: expected a 5-D weight [out_channels, in_channels / groups, kD, kH, kW], got shape {:?}",
            w.shape()
        );
    }
    let (s, p, d) = (o.stride, o.padding, o.dilation);
    if o.groups == 0 || [s.0, s.1, s.2, d.0, d.1, d.2].contains(&0) {
        panic!("{OP}: stride, dilation and groups must be positive, got {o:?}");
    }
    let (c, out, ci) = (x.shape()[1], w.shape()[0], w.shape()[1]);
    if !c.is_multiple_of(o.groups) || !out.is_multiple_of(o.groups) {
        panic!("{OP}: in_channels {c} and out_channels {out} must both be divisible by groups {}", o.groups);
    }
    if ci * o.groups != c {
        panic!(
            "{OP}: input {shown:?} x weight {:?}: expected input with {} channels (weight in_channels {ci} x groups {}), got {c}",
            w.shape(),
            ci * o.groups,
            o.groups
        );
    }
    if let Some(b) = bias {
        if b.shape() != [out] {
            panic!("{OP}: bias of shape {:?} for {out} output channels (expected [{out}])", b.shape());
        }
    }
    let k = &w.shape()[2..];
    if k.contains(&0) {
        panic!("{OP}: kernel size must be positive, got weight shape {:?}", w.shape());
    }
    let sizes = [(2, 0, s.0, p.0, d.0), (3, 1, s.1, p.1, d.1), (4, 2, s.2, p.2, d.2)];
    let outs: Vec<Option<usize>> =
        sizes.iter().map(|&(axis, ki, s, p, d)| super::conv::out_size(x.shape()[axis], k[ki], s, p, d)).collect();
    if outs.contains(&None) {
        panic!("{OP}: input {shown:?} (padded by {p:?}) is smaller than the dilated kernel {k:?} (dilation {d:?})");
    }
    (outs[0].expect("checked"), k[0])
}

impl Tensor {
    /// 3-D convolution (cross-correlation, as PyTorch) of `self` (`[N, C, D, H, W]`, or
    /// `[C, D, H, W]` unbatched) with `weight` (`[O, C / groups, kD, kH, kW]`) and optional
    /// `bias` (`[O]`); output `[N, O, Do, Ho, Wo]`. Computed as `kD` batched 2-D
    /// convolutions, each depth tap a 2-D convolution of the matching input planes.
    ///
    /// ```
    /// use nn_core::{ops::Conv3dConfig, Tensor};
    /// let x = Tensor::ones(&[1, 1, 3, 3, 3]);
    /// let w = Tensor::ones(&[2, 1, 2, 2, 2]);
    /// let y = x.conv3d(&w, None, Conv3dConfig::default());
    /// assert_eq!(y.shape(), &[1, 2, 2, 2, 2]);
    /// assert!(y.to_vec().iter().all(|&v| v == 8.0));
    /// ```
    ///
    /// # Panics
    /// On shapes that do not fit (naming them), as [`conv2d`](Tensor::conv2d).
    #[track_caller]
    pub fn conv3d(&self, weight: &Tensor, bias: Option<&Tensor>, options: Conv3dConfig) -> Tensor {
        const OP: &str = crate::names::CONV3D;
        let _op = crate::autograd::entry::op_entry!(untraced crate::names::CONV3D, [Some(self), Some(weight), bias],
            again = |c| c[0].expect("present").conv3d(c[1].expect("present"), c[2], options));
        let (x, unbatched) = batched(OP, self);
        let (dout, kd) = conv3d_geometry(&x, weight, bias, &options, self.shape());
        let (s, p, d) = (options.stride, options.padding, options.dilation);
        let n = x.shape()[0];
        let pd = p.0 as i64;
        let padded = if pd > 0 { x.pad(&[0, 0, 0, 0, pd, pd], super::pad::PadMode::Constant, 0.0) } else { x };
        let plane =
            Conv2dConfig { stride: (s.1, s.2), padding: (p.1, p.2), dilation: (d.1, d.2), groups: options.groups };
        let (c, h, w) = (padded.shape()[1], padded.shape()[3], padded.shape()[4]);
        let mut sum: Option<Tensor> = None;
        for tap in 0..kd {
            // The input planes tap `tap` meets, one per output depth.
            let first = tap * d.0;
            let planes = if s.0 == 1 {
                padded.narrow(2, first, dout)
            } else {
                let at: Vec<i64> = (0..dout).map(|t| (first + t * s.0) as i64).collect();
                padded.index_select(2, &Tensor::from_vec_i64(at, &[dout]).to_device(padded.device()))
            };
            let batch = planes.permute(&[0, 2, 1, 3, 4]).reshape(&[n * dout, c, h, w]);
            let y = batch.conv2d(&weight.narrow(2, tap, 1).squeeze_dim(2), if tap == 0 { bias } else { None }, plane);
            sum = Some(match sum {
                None => y,
                Some(acc) => acc + y,
            });
        }
        let y = sum.expect("kD > 0");
        let (o, ho, wo) = (y.shape()[1], y.shape()[2], y.shape()[3]);
        let y = y.reshape(&[n, dout, o, ho, wo]).permute(&[0, 2, 1, 3, 4]).contiguous();
        if unbatched {
            y.squeeze_dim(0)
        } else {
            y
        }
    }

    /// 3-D max pooling over `[N, C, D, H, W]` (or `[C, D, H, W]`); padded positions never
    /// win, and the element chosen in each window is PyTorch's (the first maximum in
    /// `(d, h, w)` order, the last NaN), so gradients go where PyTorch sends them.
    ///
    /// ```
    /// use nn_core::{ops::Pool3dConfig, Tensor};
    /// let x = Tensor::arange(0.0, 8.0, 1.0).reshape(&[1, 1, 2, 2, 2]);
    /// assert_eq!(x.max_pool3d(Pool3dConfig::new(2)).to_vec(), vec![7.0]);
    /// ```
    ///
    /// # Panics
    /// On a window that does not fit, or padding over half the window.
    #[track_caller]
    pub fn max_pool3d(&self, options: Pool3dConfig) -> Tensor {
        const OP: &str = crate::names::MAX_POOL3D;
        let _op = crate::autograd::entry::op_entry!(untraced crate::names::MAX_POOL3D, [Some(self)],
            again = |c| c[0].expect("present").max_pool3d(options));
        options.check(OP);
        let (x, unbatched) = batched(OP, self);
        let y = two_pass(&x, |t, o| t.max_pool2d(o), &options);
        if unbatched {
            y.squeeze_dim(0)
        } else {
            y
        }
    }

    /// 3-D average pooling over `[N, C, D, H, W]` (or `[C, D, H, W]`): with
    /// `count_include_pad` the padding counts towards each window's size, as PyTorch.
    /// Dilation is not taken (PyTorch's `avg_pool3d` has none): it must be 1.
    ///
    /// ```
    /// use nn_core::{ops::Pool3dConfig, Tensor};
    /// let x = Tensor::arange(0.0, 8.0, 1.0).reshape(&[1, 1, 2, 2, 2]);
    /// assert_eq!(x.avg_pool3d(Pool3dConfig::new(2), true).to_vec(), vec![3.5]);
    /// ```
    ///
    /// # Panics
    /// On a window that does not fit, padding over half the window, or a dilation.
    #[track_caller]
    pub fn avg_pool3d(&self, options: Pool3dConfig, count_include_pad: bool) -> Tensor {
        const OP: &str = crate::names::AVG_POOL3D;
        let _op = crate::autograd::entry::op_entry!(untraced crate::names::AVG_POOL3D, [Some(self)],
            again = |c| c[0].expect("present").avg_pool3d(options, count_include_pad));
        options.check(OP);
        if options.dilation != (1, 1, 1) {
            panic!("{OP}: average pooling takes no dilation, got {:?}", options.dilation);
        }
        let (x, unbatched) = batched(OP, self);
        let y = two_pass(&x, |t, o| t.avg_pool2d(o, count_include_pad), &options);
        if unbatched {
            y.squeeze_dim(0)
        } else {
            y
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Conv3dConfig, Pool3dConfig};
    use crate::testing::gradcheck;
    use crate::Tensor;

    /// A deterministic input of `shape` with distinct values (no ties for the max pools'
    /// finite differences).
    fn vals(shape: &[usize], seed: u64) -> Tensor {
        let n: usize = shape.iter().product();
        let v = (0..n as u64).map(|i| ((i * 7919 + seed * 104729) % 9973) as f64 / 4986.0 - 1.0).collect();
        Tensor::from_vec_f64(v, shape)
    }

    fn conv(
        stride: (usize, usize, usize),
        padding: (usize, usize, usize),
        dilation: (usize, usize, usize),
        groups: usize,
    ) -> Conv3dConfig {
        Conv3dConfig { stride, padding, dilation, groups }
    }

    #[test]
    fn conv3d_gradcheck() {
        let cases: [(Vec<usize>, [usize; 5], Conv3dConfig); 4] = [
            (vec![1, 2, 3, 4, 4], [2, 2, 2, 2, 2], conv((1, 1, 1), (0, 0, 0), (1, 1, 1), 1)),
            (vec![2, 1, 5, 4, 3], [1, 1, 2, 2, 1], conv((2, 1, 2), (1, 0, 1), (1, 1, 1), 1)),
            (vec![1, 2, 6, 3, 4], [4, 1, 2, 2, 2], conv((1, 2, 1), (1, 1, 0), (2, 1, 1), 2)),
            // Unbatched: `[C, D, H, W]`.
            (vec![2, 3, 4, 3], [2, 2, 2, 2, 2], conv((1, 1, 1), (1, 1, 1), (1, 1, 1), 1)),
        ];
        for (i, (xs, ws, o)) in cases.into_iter().enumerate() {
            let b = vals(&[ws[0]], 3);
            gradcheck(|t| t[0].conv3d(&t[1], Some(&t[2]), o), &[vals(&xs, 1), vals(&ws, 2), b])
                .unwrap_or_else(|e| panic!("case {i}: {e}"));
        }
    }

    #[test]
    fn conv3d_is_the_sum_over_its_taps() {
        // Direct definition at one output element: y[0, o, z, y, x] = b[o] + sum over c, kd, kh, kw.
        let (x, w, b) = (vals(&[1, 2, 4, 4, 4], 1), vals(&[3, 2, 2, 3, 2], 2), vals(&[3], 3));
        let o = conv((2, 1, 1), (1, 1, 0), (1, 1, 2), 1);
        let y = x.conv3d(&w, Some(&b), o);
        assert_eq!(y.shape(), &[1, 3, 3, 4, 2]);
        let (xv, wv, bv, yv) = (x.to_vec_f64(), w.to_vec_f64(), b.to_vec_f64(), y.to_vec_f64());
        for (oc, z, r, q) in [(0, 0, 0, 0), (1, 1, 2, 1), (2, 2, 3, 0)] {
            let mut want = bv[oc];
            for c in 0..2 {
                for (kd, kh, kw) in (0..2).flat_map(|a| (0..3).flat_map(move |b| (0..2).map(move |c| (a, b, c)))) {
                    let (zi, ri, qi) = (z as i64 * 2 - 1 + kd, r as i64 - 1 + kh, q as i64 + 2 * kw);
                    if (0..4).contains(&zi) && (0..4).contains(&ri) && (0..4).contains(&qi) {
                        let xi = ((c * 4 + zi as usize) * 4 + ri as usize) * 4 + qi as usize;
                        let wi = (((oc * 2 + c) * 2 + kd as usize) * 3 + kh as usize) * 2 + kw as usize;
                        want += xv[xi] * wv[wi];
                    }
                }
            }
            let got = yv[((oc * 3 + z) * 4 + r) * 2 + q];
            assert!((got - want).abs() < 1e-12, "at ({oc}, {z}, {r}, {q}): {got} vs {want}");
        }
    }

    #[test]
    fn pools_gradcheck() {
        let x = vals(&[2, 2, 5, 4, 6], 4);
        let o = Pool3dConfig {
            kernel: (3, 2, 2),
            stride: (2, 1, 2),
            padding: (1, 1, 0),
            dilation: (1, 1, 2),
            ceil_mode: false,
        };
        gradcheck(|t| t[0].max_pool3d(o), std::slice::from_ref(&x)).unwrap();
        let o = Pool3dConfig { ceil_mode: true, dilation: (1, 1, 1), ..o };
        for include in [true, false] {
            gradcheck(|t| t[0].avg_pool3d(o, include), std::slice::from_ref(&x)).unwrap();
        }
    }

    #[test]
    fn max_pool3d_keeps_the_first_maximum_and_the_last_nan_in_window_order() {
        // One 2x2x2 window: ties at (0,1,1) and (1,0,0), so the first in (d, h, w) order wins.
        let x =
            Tensor::from_vec_f64(vec![0.0, 1.0, 1.0, 5.0, 5.0, 1.0, 2.0, 5.0], &[1, 1, 2, 2, 2]).requires_grad_(true);
        x.max_pool3d(Pool3dConfig::new(2)).sum().backward();
        assert_eq!(x.grad().unwrap().to_vec_f64(), [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
        // NaN at (0,0,1) and (1,1,0): PyTorch keeps the last.
        let x = Tensor::from_vec_f64(vec![0.0, f64::NAN, 1.0, 5.0, 5.0, 1.0, f64::NAN, 5.0], &[1, 1, 2, 2, 2])
            .requires_grad_(true);
        let y = x.max_pool3d(Pool3dConfig::new(2));
        assert!(y.to_vec_f64()[0].is_nan());
        y.sum().backward();
        assert_eq!(x.grad().unwrap().to_vec_f64(), [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0]);
    }

    #[test]
    fn bad_options_are_refused_by_name() {
        let x = Tensor::zeros(&[1, 1, 4, 4, 4]);
        let e = std::panic::catch_unwind(|| {
            x.avg_pool3d(Pool3dConfig { dilation: (2, 1, 1), ..Pool3dConfig::new(2) }, true)
        })
        .expect_err("dilated average");
        assert!(e.downcast_ref::<String>().unwrap().contains("avg_pool3d: average pooling takes no dilation"));
        let e = std::panic::catch_unwind(|| x.conv3d(&Tensor::zeros(&[2, 2, 1, 1, 1]), None, Conv3dConfig::default()))
            .expect_err("channels");
        assert!(e.downcast_ref::<String>().unwrap().contains("conv3d: input [1, 1, 4, 4, 4] x weight [2, 2, 1, 1, 1]"));
        let e = std::panic::catch_unwind(|| x.conv3d(&Tensor::zeros(&[2, 1, 1, 5, 1]), None, Conv3dConfig::default()))
            .expect_err("too small");
        assert!(e.downcast_ref::<String>().unwrap().contains("is smaller than the dilated kernel [1, 5, 1]"));
    }
}
