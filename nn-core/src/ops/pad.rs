//! Padding (`torch.nn.functional.pad`): constant, reflect, replicate and circular modes.
//!
//! Constant padding is a `narrow` (for negative pads, which crop) and a `cat` with filled
//! blocks; the other modes gather each padded dim with one `index_select` through a map
//! from output to input positions. Both are existing differentiable ops, so the backward
//! (a narrow of the gradient, or an `index_add` that folds the padded positions back onto
//! the entries they copied) and every device come with them.

use crate::tensor::Tensor;

/// How [`Tensor::pad`] fills the new positions (PyTorch's `mode` strings).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PadMode {
    /// `'constant'`: the given value.
    #[default]
    Constant,
    /// `'reflect'`: the mirror image without repeating the edge (`[2, 1 | 0, 1, 2 | 1, 0]`).
    Reflect,
    /// `'replicate'`: the edge value repeated (`[0, 0 | 0, 1, 2 | 2, 2]`).
    Replicate,
    /// `'circular'`: the tensor wrapped around (`[1, 2 | 0, 1, 2 | 0, 1]`).
    Circular,
}

impl PadMode {
    /// PyTorch's name of the mode.
    pub fn as_str(self) -> &'static str {
        match self {
            PadMode::Constant => "constant",
            PadMode::Reflect => "reflect",
            PadMode::Replicate => "replicate",
            PadMode::Circular => "circular",
        }
    }
}

impl std::fmt::Display for PadMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Tensor {
    /// Pads the trailing dims, as `torch.nn.functional.pad(x, pads, mode, value)`.
    ///
    /// `pads` lists `(left, right)` amounts from the last dim backwards:
    /// `[last_left, last_right, second_last_left, second_last_right, ...]`, at most two per
    /// dim. The padded dim `d` grows from `n` to `left + n + right`; a negative amount
    /// crops instead. With `i = o - left` the input position of output position `o`:
    /// - [`Constant`](PadMode::Constant): `x[i]` for `0 <= i < n`, else `value` (any rank);
    /// - [`Reflect`](PadMode::Reflect): `x[|i|]`, mirrored at the far edge too
    ///   (`x[2(n-1) - i]`), needs `left, right < n`;
    /// - [`Replicate`](PadMode::Replicate): `x[clamp(i, 0, n-1)]`;
    /// - [`Circular`](PadMode::Circular): `x[i mod n]` (negative amounts crop first), needs
    ///   `left, right <= n`.
    ///
    /// As in PyTorch the last three modes pad the last 1, 2 or 3 dims of an input with one
    /// or two more dims (a batch and a channel dim), and take no `value` (pass `0.0`).
    ///
    /// ```
    /// use nn_core::{ops::PadMode, Tensor};
    /// let x = Tensor::from_vec(vec![0.0, 1.0, 2.0], &[1, 3]);
    /// assert_eq!(x.pad(&[2, 1], PadMode::Constant, 9.0).to_vec(), vec![9.0, 9.0, 0.0, 1.0, 2.0, 9.0]);
    /// assert_eq!(x.pad(&[2, 1], PadMode::Reflect, 0.0).to_vec(), vec![2.0, 1.0, 0.0, 1.0, 2.0, 1.0]);
    /// assert_eq!(x.pad(&[2, 1], PadMode::Replicate, 0.0).to_vec(), vec![0.0, 0.0, 0.0, 1.0, 2.0, 2.0]);
    /// assert_eq!(x.pad(&[2, 1], PadMode::Circular, 0.0).to_vec(), vec![1.0, 2.0, 0.0, 1.0, 2.0, 0.0]);
    /// assert_eq!(x.pad(&[-1, 0], PadMode::Constant, 0.0).to_vec(), vec![1.0, 2.0]);
    /// ```
    ///
    /// # Panics
    /// When `pads` has an odd length or more than two entries per dim; when a reflect pad
    /// is not below its dim's size or a circular pad exceeds it; when a negative pad
    /// leaves a negative size; when a non-constant mode gets a `value` or an input rank it
    /// does not pad.
    #[track_caller]
    pub fn pad(&self, pads: &[i64], mode: PadMode, value: f64) -> Tensor {
        let rank = self.rank();
        if !pads.len().is_multiple_of(2) {
            panic!("pad: padding length must be divisible by 2, got pads {pads:?} (length {})", pads.len());
        }
        if pads.len() > 2 * rank {
            panic!(
                "pad: padding length should be less than or equal to two times the input dimension but got padding length {} (pads {pads:?}) and input of dimension {rank} (shape {:?})",
                pads.len(),
                self.shape()
            );
        }
        if mode != PadMode::Constant {
            if value != 0.0 {
                panic!("pad: padding mode \"{mode}\" doesn't take in value argument (got value {value})");
            }
            let k = pads.len() / 2;
            if !(1..=3).contains(&k) || rank < k + 1 || rank > k + 2 {
                panic!(
                    "pad: padding size {} (pads {pads:?}) is not supported for {rank}D input tensor (shape {:?}) in mode \"{mode}\"; supported: 2D or 3D input with padding size 2, 3D or 4D with 4, 4D or 5D with 6",
                    pads.len(),
                    self.shape()
                );
            }
        }
        // Under CPU autocast, reflect and replicate run in f32 (PyTorch's CPU list names
        // `reflection_pad1d/2d` and `replication_pad1d/2d/3d`: a 3-D reflect pad is not
        // listed); the ops pad is built from are its parts, which autocast leaves alone.
        let name = match mode {
            PadMode::Reflect if pads.len() < 6 => crate::names::REFLECTION_PAD,
            PadMode::Replicate => crate::names::REPLICATION_PAD,
            PadMode::Reflect | PadMode::Constant | PadMode::Circular => crate::names::PAD,
        };
        let _op = crate::autograd::entry::op_entry!(untraced name, [Some(self)],
            again = |c| c[0].expect("present").pad(pads, mode, value));
        let mut y = self.clone();
        for (k, lr) in pads.chunks(2).enumerate() {
            let (l, r) = (lr[0], lr[1]);
            if l == 0 && r == 0 {
                continue;
            }
            let d = rank - 1 - k;
            y = match mode {
                PadMode::Constant => pad_constant(&y, d, l, r, value, pads),
                PadMode::Reflect | PadMode::Replicate => pad_gather(&y, d, l, r, mode, pads),
                PadMode::Circular => {
                    let n = y.shape()[d] as i64;
                    if l > n || r > n {
                        panic!(
                            "pad: circular padding ({l}, {r}) of dim {d} wraps around more than once: it must not exceed the dim's size {n} (argument `pads` {pads:?}, input shape {:?})",
                            self.shape()
                        );
                    }
                    let cropped = crop(&y, d, l.min(0), r.min(0), pads);
                    pad_gather(&cropped, d, l.max(0), r.max(0), mode, pads)
                }
            };
        }
        y
    }
}

/// The size of dim `d` after padding by `(l, r)`; panics when it would be negative.
#[track_caller]
fn padded_size(x: &Tensor, d: usize, l: i64, r: i64, pads: &[i64]) -> usize {
    let n = x.shape()[d] as i64;
    let out = n + l + r;
    if out < 0 {
        panic!(
            "pad: the input size {n}, plus negative padding {l} and {r} resulted in a negative output size, which is invalid (dim {d} of input shape {:?}, pads {pads:?})",
            x.shape()
        );
    }
    out as usize
}

/// Crops `-l` entries at the front and `-r` at the back of dim `d` (`l, r <= 0`).
#[track_caller]
fn crop(x: &Tensor, d: usize, l: i64, r: i64, pads: &[i64]) -> Tensor {
    let len = padded_size(x, d, l, r, pads);
    if len == x.shape()[d] {
        return x.clone();
    }
    x.narrow(d, (-l) as usize, len)
}

#[track_caller]
fn pad_constant(x: &Tensor, d: usize, l: i64, r: i64, value: f64, pads: &[i64]) -> Tensor {
    let core = crop(x, d, l.min(0), r.min(0), pads);
    let block = |len: i64| {
        let mut shape = core.shape().to_vec();
        shape[d] = len as usize;
        Tensor::try_full_on("pad", &shape, value, core.dtype(), core.device()).unwrap_or_else(|e| panic!("{e}"))
    };
    let (lb, rb) = ((l > 0).then(|| block(l)), (r > 0).then(|| block(r)));
    let parts: Vec<&Tensor> = [lb.as_ref(), Some(&core), rb.as_ref()].into_iter().flatten().collect();
    if parts.len() == 1 {
        return core;
    }
    Tensor::cat(&parts, d)
}

/// Reflect, replicate or circular padding of dim `d` as one `index_select`.
#[track_caller]
fn pad_gather(x: &Tensor, d: usize, l: i64, r: i64, mode: PadMode, pads: &[i64]) -> Tensor {
    let n = x.shape()[d] as i64;
    if mode == PadMode::Reflect && (l >= n || r >= n) {
        panic!(
            "pad: argument `pads` {pads:?}: reflect padding ({l}, {r}) of dim {d} should be less than the dim's size {n} (input shape {:?})",
            x.shape()
        );
    }
    let len = padded_size(x, d, l, r, pads);
    if n == 0 && len > 0 {
        panic!("pad: {mode} padding of dim {d} needs a non-empty dim (input shape {:?}, pads {pads:?})", x.shape());
    }
    let index: Vec<i64> = (0..len as i64)
        .map(|o| {
            let i = o - l;
            match mode {
                PadMode::Reflect => {
                    let i = i.abs();
                    if i >= n {
                        2 * (n - 1) - i
                    } else {
                        i
                    }
                }
                PadMode::Replicate => i.clamp(0, n - 1),
                PadMode::Circular => i.rem_euclid(n),
                PadMode::Constant => unreachable!("constant padding does not gather"),
            }
        })
        .collect();
    let index = Tensor::from_vec_i64(index, &[len]).to_device(x.device());
    x.index_select(d, &index)
}

#[cfg(test)]
mod tests {
    use super::PadMode::{self, *};
    use crate::testing::gradcheck;
    use crate::testing::support::{check_noncontig, grad, leaf, t64};
    use crate::{DType, Device, Tensor};

    fn ramp(n: usize) -> Vec<f64> {
        (0..n).map(|v| v as f64).collect()
    }

    #[test]
    fn one_dim_modes_match_torch() {
        // F.pad(torch.arange(4.).view(1, 4), (3, 2), mode=m)
        let x = t64(&ramp(4), &[1, 4]);
        let cases: [(PadMode, [f64; 9]); 4] = [
            (Constant, [-1.0, -1.0, -1.0, 0.0, 1.0, 2.0, 3.0, -1.0, -1.0]),
            (Reflect, [3.0, 2.0, 1.0, 0.0, 1.0, 2.0, 3.0, 2.0, 1.0]),
            (Replicate, [0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 3.0, 3.0]),
            (Circular, [1.0, 2.0, 3.0, 0.0, 1.0, 2.0, 3.0, 0.0, 1.0]),
        ];
        for (mode, expect) in cases {
            let v = if mode == Constant { -1.0 } else { 0.0 };
            let y = x.pad(&[3, 2], mode, v);
            assert_eq!((y.shape(), y.to_vec_f64()), (&[1, 9][..], expect.to_vec()), "{mode}");
        }
    }

    #[test]
    fn negative_pads_crop_as_in_torch() {
        // F.pad(torch.arange(5.).view(1, 1, 5), (-1, 2), mode=m)
        let x = t64(&ramp(5), &[1, 1, 5]);
        assert_eq!(x.pad(&[-1, 2], Reflect, 0.0).to_vec_f64(), vec![1.0, 2.0, 3.0, 4.0, 3.0, 2.0]);
        assert_eq!(x.pad(&[-1, 2], Replicate, 0.0).to_vec_f64(), vec![1.0, 2.0, 3.0, 4.0, 4.0, 4.0]);
        assert_eq!(x.pad(&[-1, 2], Circular, 0.0).to_vec_f64(), vec![1.0, 2.0, 3.0, 4.0, 1.0, 2.0]);
        assert_eq!(x.pad(&[-1, 2], Constant, 0.0).to_vec_f64(), vec![1.0, 2.0, 3.0, 4.0, 0.0, 0.0]);
        assert_eq!(x.pad(&[-2, -3], Constant, 0.0).shape(), &[1, 1, 0]);
        // Cropping the second-to-last dim too.
        let y = t64(&ramp(6), &[2, 3]).pad(&[0, 0, -1, 1], Constant, 7.0);
        assert_eq!(y.to_vec_f64(), vec![3.0, 4.0, 5.0, 7.0, 7.0, 7.0]);
    }

    #[test]
    fn two_dim_reflect_pads_both_dims() {
        // F.pad(torch.arange(6.).view(1, 2, 3), (1, 1, 1, 0), mode='reflect')
        let y = t64(&ramp(6), &[1, 2, 3]).pad(&[1, 1, 1, 0], Reflect, 0.0);
        assert_eq!(y.shape(), &[1, 3, 5]);
        assert_eq!(y.to_vec_f64(), vec![4., 3., 4., 5., 4., 1., 0., 1., 2., 1., 4., 3., 4., 5., 4.]);
    }

    #[test]
    fn backward_folds_padding_back() {
        let x = leaf(&ramp(4), &[1, 4]);
        let y = x.pad(&[2, 1], Reflect, 0.0);
        // y = [x2, x1, x0, x1, x2, x3, x2]
        (&y * &t64(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], &[1, 7])).sum().backward();
        assert_eq!(grad(&x), vec![3.0, 2.0 + 4.0, 1.0 + 5.0 + 7.0, 6.0]);
        let x = leaf(&ramp(4), &[1, 4]);
        x.pad(&[1, -1], Constant, 5.0).exp().mean().backward();
        let e = |v: f64| v.exp() / 4.0;
        assert_eq!(grad(&x), vec![e(0.0), e(1.0), e(2.0), 0.0]);
    }

    #[test]
    fn gradcheck_every_mode() {
        let x = t64(&[0.3, -1.2, 2.0, -0.7, 1.1, 0.4, 0.9, -0.2, 1.6, -1.4, 0.05, 0.8], &[1, 3, 4]);
        for mode in [Constant, Reflect, Replicate, Circular] {
            gradcheck(|t| t[0].pad(&[2, 3, 1, 2], mode, 0.0).tanh(), std::slice::from_ref(&x)).unwrap();
            gradcheck(|t| t[0].pad(&[-1, 2], mode, 0.0).exp(), std::slice::from_ref(&x)).unwrap();
            check_noncontig(|t| t[0].pad(&[2, 3, 1, 2], mode, 0.0), std::slice::from_ref(&x));
        }
    }

    #[test]
    fn constant_pads_any_rank_and_keeps_dtype() {
        let y = Tensor::from_vec(vec![1.0, 2.0], &[2]).pad(&[1, 0], Constant, 0.5);
        assert_eq!((y.dtype(), y.to_vec()), (DType::F32, vec![0.5, 1.0, 2.0]));
        let m = Tensor::full_on(&[2, 3, 4], 0.0, DType::F32, Device::Meta);
        assert_eq!(m.pad(&[1, 1, 2, 2, 0, 1], Constant, 0.0).shape(), &[3, 7, 6]);
        assert_eq!(m.pad(&[1, 1, 2, 2], Replicate, 0.0).shape(), &[2, 7, 6]);
    }

    #[test]
    #[should_panic(
        expected = "pad: argument `pads` [4, 0]: reflect padding (4, 0) of dim 1 should be less than the dim's size 4 (input shape [1, 4])"
    )]
    fn reflect_pad_as_large_as_the_dim_panics() {
        t64(&ramp(4), &[1, 4]).pad(&[4, 0], Reflect, 0.0);
    }

    #[test]
    #[should_panic(expected = "pad: padding length must be divisible by 2, got pads [1, 1, 1]")]
    fn odd_pads_panic() {
        t64(&ramp(4), &[1, 4]).pad(&[1, 1, 1], Constant, 0.0);
    }

    #[test]
    #[should_panic(
        expected = "pad: padding length should be less than or equal to two times the input dimension but got padding length 6 (pads [1, 1, 1, 1, 1, 1]) and input of dimension 2"
    )]
    fn too_many_pads_panic() {
        t64(&ramp(4), &[1, 4]).pad(&[1, 1, 1, 1, 1, 1], Constant, 0.0);
    }

    #[test]
    #[should_panic(expected = "pad: circular padding (5, 0) of dim 1 wraps around more than once")]
    fn circular_pad_beyond_the_size_panics() {
        t64(&ramp(4), &[1, 4]).pad(&[5, 0], Circular, 0.0);
    }

    #[test]
    #[should_panic(
        expected = "pad: the input size 4, plus negative padding -3 and -2 resulted in a negative output size"
    )]
    fn crop_beyond_the_size_panics() {
        t64(&ramp(4), &[1, 4]).pad(&[-3, -2], Constant, 0.0);
    }

    #[test]
    #[should_panic(expected = "pad: padding mode \"replicate\" doesn't take in value argument")]
    fn value_in_replicate_mode_panics() {
        t64(&ramp(4), &[1, 4]).pad(&[1, 1], Replicate, 1.0);
    }

    #[test]
    #[should_panic(expected = "pad: padding size 2 (pads [1, 1]) is not supported for 1D input tensor")]
    fn reflect_of_a_1d_input_panics_as_in_torch() {
        t64(&ramp(4), &[4]).pad(&[1, 1], Reflect, 0.0);
    }
}
