//! PyTorch arguments that change an op's arithmetic rather than its data: convolution
//! `padding="same"`, a real-valued (or negative) variance `correction`, and average
//! pooling's `divisor_override`.

use super::{Conv2dConfig, Pool2dConfig};
use crate::tensor::Tensor;

/// The padding before and after of a `"same"` convolution along one dim: the total
/// `dilation * (kernel - 1)`, the odd element after (PyTorch's `_convolution_mode` rule).
fn same_padding(kernel: usize, dilation: usize) -> (usize, usize) {
    let total = dilation * kernel.saturating_sub(1);
    (total / 2, total - total / 2)
}

impl Tensor {
    /// 2-D convolution with PyTorch's `padding="same"` (stride 1): the output keeps the
    /// input's height and width, padded with zeros by `dilation * (k - 1)` per dim, the odd
    /// element at the end. (`padding="valid"` is [`conv2d`](Tensor::conv2d)'s zero padding.)
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::ones(&[1, 1, 4, 5]);
    /// let w = Tensor::ones(&[2, 1, 2, 3]);
    /// assert_eq!(x.conv2d_same(&w, None, (1, 1), 1).shape(), [1, 2, 4, 5]);
    /// ```
    ///
    /// # Panics
    /// As `conv2d`.
    #[track_caller]
    pub fn conv2d_same(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        dilation: (usize, usize),
        groups: usize,
    ) -> Tensor {
        let r = weight.rank();
        let (kh, kw) = if r == 4 { (weight.shape()[2], weight.shape()[3]) } else { (1, 1) };
        let ((t, b), (l, rr)) = (same_padding(kh, dilation.0), same_padding(kw, dilation.1));
        let config = |padding| Conv2dConfig { stride: (1, 1), padding, dilation, groups };
        if t == b && l == rr {
            return self.conv2d(weight, bias, config((t, l)));
        }
        // The symmetric part in the convolution, the odd element as an explicit pad.
        let x = self.pad(&[0, (rr - l) as i64, 0, (b - t) as i64], super::PadMode::Constant, 0.0);
        x.conv2d(weight, bias, config((t, l)))
    }

    /// 1-D convolution with PyTorch's `padding="same"` (stride 1; see
    /// [`conv2d_same`](Tensor::conv2d_same)).
    ///
    /// ```
    /// use nn_core::Tensor;
    /// assert_eq!(Tensor::ones(&[1, 1, 6]).conv1d_same(&Tensor::ones(&[1, 1, 4]), None, 2, 1).shape(), [1, 1, 6]);
    /// ```
    #[track_caller]
    pub fn conv1d_same(&self, weight: &Tensor, bias: Option<&Tensor>, dilation: usize, groups: usize) -> Tensor {
        let k = if weight.rank() == 3 { weight.shape()[2] } else { 1 };
        let (a, b) = same_padding(k, dilation);
        let x = if a == b { self.clone() } else { self.pad(&[0, (b - a) as i64], super::PadMode::Constant, 0.0) };
        x.conv1d(weight, bias, 1, a, dilation, groups)
    }

    /// Variance over `dims` with any real `correction` (PyTorch's `var(x, dims,
    /// correction=c)`): the sum of squared deviations over `max(N - correction, 0)`.
    /// [`var_dims`](Tensor::var_dims) is the integer form.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 3.0], &[2]);
    /// assert_eq!(x.var_correction(&[0], 0.5, false).to_vec(), [4.0 / 3.0]);
    /// assert_eq!(x.var_correction(&[0], -1.0, false).to_vec(), [2.0 / 3.0]);
    /// ```
    #[track_caller]
    pub fn var_correction<D: crate::Dim>(&self, dims: &[D], correction: f64, keepdim: bool) -> Tensor {
        // var_dims with correction 0 divides by N: rescaled to N - correction.
        self.var_dims(dims, 0, keepdim) * self.correction_factor("var", dims, correction)
    }

    /// `N / max(N - correction, 0)` for the `N` elements each output reduces over `dims`.
    #[track_caller]
    fn correction_factor<D: crate::Dim>(&self, op: &str, dims: &[D], correction: f64) -> f64 {
        let mask = super::reduce::resolve_dims(op, dims, self.rank());
        let n: usize = self.shape().iter().zip(&mask).filter(|(_, &m)| m).map(|(&d, _)| d).product();
        n as f64 / (n as f64 - correction).max(0.0)
    }

    /// Standard deviation with any real `correction` (see
    /// [`var_correction`](Tensor::var_correction); PyTorch's gradient, zero where the
    /// deviation is 0, as [`std_dims`](Tensor::std_dims)).
    #[track_caller]
    pub fn std_correction<D: crate::Dim>(&self, dims: &[D], correction: f64, keepdim: bool) -> Tensor {
        self.std_dims(dims, 0, keepdim) * self.correction_factor("std", dims, correction).sqrt()
    }

    /// Average pooling that divides each window's sum by `divisor` instead of its size
    /// (PyTorch's `avg_pool2d(..., divisor_override=divisor)`; the zero padding counts in
    /// the sum).
    ///
    /// ```
    /// use nn_core::{ops::Pool2dConfig, Tensor};
    /// let x = Tensor::ones(&[1, 1, 2, 2]);
    /// let cfg = Pool2dConfig { kernel: (2, 2), stride: (2, 2), padding: (0, 0), dilation: (1, 1), ceil_mode: false };
    /// assert_eq!(x.avg_pool2d_divisor(cfg, 3).to_vec(), [4.0 / 3.0]);
    /// ```
    ///
    /// # Panics
    /// As `avg_pool2d`, and for a `divisor` of 0.
    #[track_caller]
    pub fn avg_pool2d_divisor(&self, options: Pool2dConfig, divisor: usize) -> Tensor {
        if divisor == 0 {
            panic!("avg_pool2d: divisor must be not zero");
        }
        let avg = self.avg_pool2d(options, true);
        let (oh, ow) = (avg.shape()[avg.rank() - 2], avg.shape()[avg.rank() - 1]);
        let (h, w) = (self.shape()[self.rank() - 2], self.shape()[self.rank() - 1]);
        // The window sizes avg_pool2d divides by with count_include_pad: each window ends at
        // the padded input's edge (PyTorch's `pool_size`).
        let sizes = |o: usize, n: usize, k: usize, s: usize, p: usize| -> Vec<f64> {
            (0..o).map(|i| ((i * s + k).min(n + 2 * p) as f64 - (i * s) as f64).max(0.0)).collect()
        };
        let (hs, ws) = (
            sizes(oh, h, options.kernel.0, options.stride.0, options.padding.0),
            sizes(ow, w, options.kernel.1, options.stride.1, options.padding.1),
        );
        let area: Vec<f64> = hs.iter().flat_map(|a| ws.iter().map(move |b| a * b / divisor as f64)).collect();
        let area = Tensor::from_vec_f64(area, &[oh, ow]).to_dtype(avg.dtype()).to_device(avg.device());
        avg * area
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::Pool2dConfig;
    use crate::testing::gradcheck;
    use crate::testing::support::t64;

    #[test]
    fn same_convolutions_keep_the_size_and_gradcheck() {
        let x = t64(&(0..30).map(|v| (v as f64 * 0.37).sin()).collect::<Vec<_>>(), &[1, 2, 3, 5]);
        let w = t64(&(0..16).map(|v| (v as f64 * 0.11).cos()).collect::<Vec<_>>(), &[2, 2, 2, 2]);
        assert_eq!(x.conv2d_same(&w, None, (1, 2), 1).shape(), [1, 2, 3, 5]);
        gradcheck(|t| t[0].conv2d_same(&t[1], None, (1, 2), 1), &[x.clone(), w]).unwrap();
        let w1 = t64(&[0.5, -1.0, 0.25, 2.0], &[2, 1, 2]);
        let x1 = x.reshape(&[1, 2, 15]);
        gradcheck(|t| t[0].conv1d_same(&t[1], None, 3, 2), &[x1, w1]).unwrap();
    }

    #[test]
    fn real_corrections_and_divisors_gradcheck() {
        let x = t64(&[0.3, -1.2, 2.0, -0.7, 1.1, 0.4], &[2, 3]);
        gradcheck(|t| t[0].var_correction(&[1], 1.5, false), std::slice::from_ref(&x)).unwrap();
        gradcheck(|t| t[0].std_correction(&[0, 1], -2.0, true), std::slice::from_ref(&x)).unwrap();
        let cfg = Pool2dConfig { kernel: (2, 2), stride: (1, 2), padding: (1, 1), dilation: (1, 1), ceil_mode: true };
        gradcheck(|t| t[0].reshape(&[1, 1, 2, 3]).avg_pool2d_divisor(cfg, 3), &[x]).unwrap();
    }
}
