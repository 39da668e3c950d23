//! Tiling ops: `repeat` (whole-tensor tiles, `torch.Tensor.repeat`) and
//! `repeat_interleave` (each element repeated in place). Both are an `expand` view
//! materialised by one `reshape` copy, so they run on every device and their backward is
//! `expand`'s (a sum over the repeats).

use crate::dtype::DType;
use crate::shape::{Dim, Dims};
use crate::tensor::Tensor;

impl Tensor {
    /// Tiles the tensor `repeats[i]` times along each dim, as `torch.Tensor.repeat`.
    ///
    /// `repeats` may be longer than the rank: the tensor is first viewed with leading dims
    /// of size 1. Output shape: `[repeats[i] * size[i]]` with `size` the shape so padded;
    /// `out[j0, j1, ..] = x[j0 % s0, j1 % s1, ..]`.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 2.0], &[2]);
    /// let y = x.repeat(&[2, 3]);
    /// assert_eq!(y.shape(), &[2, 6]);
    /// assert_eq!(y.to_vec(), vec![1.0, 2.0, 1.0, 2.0, 1.0, 2.0, 1.0, 2.0, 1.0, 2.0, 1.0, 2.0]);
    /// ```
    ///
    /// # Panics
    /// When `repeats` has fewer entries than the tensor has dims.
    #[track_caller]
    pub fn repeat(&self, repeats: &[usize]) -> Tensor {
        if repeats.len() < self.rank() {
            panic!(
                "repeat: number of repeat dims ({}, repeats {repeats:?}) can not be smaller than the number of dims of the tensor (shape {:?})",
                repeats.len(),
                self.shape()
            );
        }
        let lead = repeats.len() - self.rank();
        let sizes = std::iter::repeat_n(1, lead).chain(self.shape().iter().copied());
        let (mut split, mut tiled, mut out) = (Dims::new(), Dims::new(), Dims::new());
        for (&r, s) in repeats.iter().zip(sizes) {
            split.extend([1, s]);
            tiled.extend([r, s]);
            out.push(r.checked_mul(s).unwrap_or_else(|| {
                panic!("repeat: {r} repeats of a dim of size {s} overflow (shape {:?})", self.shape())
            }));
        }
        crate::shape::numel_of("repeat", &out);
        self.reshape(&split).expand(&tiled).reshape(&out)
    }

    /// Repeats each element `repeats` times in place along `dim`, as
    /// `torch.repeat_interleave(x, repeats, dim)`: output size `repeats * size[dim]` along
    /// `dim`, `out[.., j, ..] = x[.., j / repeats, ..]`. (PyTorch's `dim=None` flattens
    /// first: call [`flatten`](Tensor::flatten) then use dim 0.)
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]);
    /// assert_eq!(x.repeat_interleave(2, 0).to_vec(), vec![1.0, 2.0, 1.0, 2.0, 3.0, 4.0, 3.0, 4.0]);
    /// assert_eq!(x.repeat_interleave(2, 1).to_vec(), vec![1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0]);
    /// ```
    #[track_caller]
    pub fn repeat_interleave<D: Dim>(&self, repeats: usize, dim: D) -> Tensor {
        let x = if self.rank() == 0 { self.reshape(&[1]) } else { self.clone() };
        let d = dim.resolve(x.rank(), "repeat_interleave");
        let mut tiled: Dims = x.shape().into();
        tiled.insert(d + 1, repeats);
        let mut out: Dims = x.shape().into();
        out[d] = out[d].checked_mul(repeats).unwrap_or_else(|| {
            panic!("repeat_interleave: {repeats} repeats overflow dim {d} of shape {:?}", x.shape())
        });
        crate::shape::numel_of("repeat_interleave", &out);
        x.unsqueeze(d + 1).expand(&tiled).reshape(&out)
    }

    /// Repeats element `i` along `dim` `repeats[i]` times, as
    /// `torch.repeat_interleave(x, repeats_tensor, dim)`: `repeats` is a 1-D `i64` tensor of
    /// length `size[dim]` (or one element, used for every entry); the output has
    /// `sum(repeats)` entries along `dim`. The counts are read on the host (the output
    /// shape depends on them; on a GPU that read waits for the device, as in PyTorch), then
    /// the op is one [`index_select`](Tensor::index_select) on the tensor's device.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3]);
    /// let r = Tensor::from_vec_i64(vec![2, 0, 1], &[3]);
    /// assert_eq!(x.repeat_interleave_tensor(&r, 0).to_vec(), vec![1.0, 1.0, 3.0]);
    /// ```
    ///
    /// # Panics
    /// When `repeats` is not a 1-D `i64` tensor of the right length, or holds a negative
    /// count.
    #[track_caller]
    pub fn repeat_interleave_tensor<D: Dim>(&self, repeats: &Tensor, dim: D) -> Tensor {
        const OP: &str = "repeat_interleave";
        let x = if self.rank() == 0 { self.reshape(&[1]) } else { self.clone() };
        let d = dim.resolve(x.rank(), OP);
        let n = x.shape()[d];
        if repeats.dtype() != DType::I64 || repeats.rank() > 1 {
            panic!(
                "{OP}: repeats must be a 0-D or 1-D i64 tensor, got {} of shape {:?}",
                repeats.dtype(),
                repeats.shape()
            );
        }
        let counts = repeats.to_vec_i64();
        let counts = match counts.len() {
            1 => vec![counts[0]; n],
            len if len == n => counts,
            len => panic!(
                "{OP}: repeats must have the same size as input along dim {d}, but got repeats.size(0) = {len} and input.size({d}) = {n} (shape {:?})",
                x.shape()
            ),
        };
        if let Some(bad) = counts.iter().find(|&&c| c < 0) {
            panic!("{OP}: repeats can not be negative, got {bad}");
        }
        let index: Vec<i64> =
            counts.iter().enumerate().flat_map(|(i, &c)| std::iter::repeat_n(i as i64, c as usize)).collect();
        let len = index.len();
        let index = Tensor::from_vec_i64(index, &[len]).to_device(x.device());
        x.index_select(d, &index)
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::gradcheck;
    use crate::testing::support::{check_noncontig, grad, leaf, t64};
    use crate::{DType, Device, Tensor};

    fn x23() -> Tensor {
        leaf(&[0.5, -1.0, 2.0, 1.5, 0.25, -3.0], &[2, 3])
    }

    #[test]
    fn repeat_forward_matches_torch() {
        // torch.tensor([[0.5, -1.0, 2.0], [1.5, 0.25, -3.0]]).repeat(2, 1, 2)
        let y = x23().repeat(&[2, 1, 2]);
        assert_eq!(y.shape(), &[2, 2, 6]);
        let row0 = [0.5, -1.0, 2.0, 0.5, -1.0, 2.0];
        let row1 = [1.5, 0.25, -3.0, 1.5, 0.25, -3.0];
        let one: Vec<f64> = row0.iter().chain(&row1).copied().collect();
        assert_eq!(y.to_vec_f64(), [one.clone(), one].concat());
        assert_eq!(x23().repeat(&[1, 1]).to_vec_f64(), x23().to_vec_f64());
        assert_eq!(x23().repeat(&[0, 2]).shape(), &[0, 6]);
        let s = t64(&[7.0], &[]).repeat(&[3]);
        assert_eq!((s.shape(), s.to_vec_f64()), (&[3][..], vec![7.0; 3]));
    }

    #[test]
    fn repeat_backward_sums_the_tiles() {
        let x = x23();
        let y = x.repeat(&[2, 2]);
        let w = t64(&(0..24).map(|v| v as f64).collect::<Vec<_>>(), &[4, 6]);
        (&y * &w).sum().backward();
        // Element (i, j) of x sits at (i + 2a, j + 3b) for a, b in {0, 1}.
        let expect: Vec<f64> = (0..2)
            .flat_map(|i| {
                (0..3).map(move |j| {
                    let mut s = 0.0;
                    for a in 0..2 {
                        for b in 0..2 {
                            s += ((i + 2 * a) * 6 + j + 3 * b) as f64;
                        }
                    }
                    s
                })
            })
            .collect();
        assert_eq!(grad(&x), expect);
    }

    #[test]
    fn repeat_gradcheck() {
        let x = t64(&[0.3, -1.2, 2.0, -0.7, 1.1, 0.4], &[2, 3]);
        gradcheck(|t| t[0].repeat(&[2, 1, 3]).exp(), std::slice::from_ref(&x)).unwrap();
        check_noncontig(|t| t[0].repeat(&[3, 2]), &[x]);
    }

    #[test]
    #[should_panic(
        expected = "repeat: number of repeat dims (1, repeats [2]) can not be smaller than the number of dims of the tensor (shape [2, 3])"
    )]
    fn repeat_with_too_few_repeats_panics() {
        x23().repeat(&[2]);
    }

    #[test]
    fn repeat_interleave_forward() {
        let x = x23();
        let y = x.repeat_interleave(2, 1);
        assert_eq!(y.shape(), &[2, 6]);
        assert_eq!(y.to_vec_f64(), vec![0.5, 0.5, -1.0, -1.0, 2.0, 2.0, 1.5, 1.5, 0.25, 0.25, -3.0, -3.0]);
        let z = x.repeat_interleave(3, -2);
        assert_eq!(z.shape(), &[6, 3]);
        assert_eq!(z.to_vec_f64()[6..9], [0.5, -1.0, 2.0]);
        assert_eq!(z.to_vec_f64()[9..12], [1.5, 0.25, -3.0]);
        assert_eq!(x.repeat_interleave(0, 0).shape(), &[0, 3]);
    }

    #[test]
    fn repeat_interleave_backward_and_gradcheck() {
        let x = x23();
        x.repeat_interleave(2, 0).exp().mean().backward();
        let expect: Vec<f64> = x.to_vec_f64().iter().map(|v| 2.0 * v.exp() / 12.0).collect();
        crate::testing::support::assert_close64(&grad(&x), &expect, 1e-12);
        let x = t64(&[0.3, -1.2, 2.0, -0.7, 1.1, 0.4], &[2, 3]);
        gradcheck(|t| t[0].repeat_interleave(3, 1).tanh(), std::slice::from_ref(&x)).unwrap();
        check_noncontig(|t| t[0].repeat_interleave(2, 0), &[x]);
    }

    #[test]
    fn repeat_interleave_tensor_forward_backward() {
        let x = x23();
        let r = Tensor::from_vec_i64(vec![1, 0, 3], &[3]);
        let y = x.repeat_interleave_tensor(&r, 1);
        assert_eq!(y.shape(), &[2, 4]);
        assert_eq!(y.to_vec_f64(), vec![0.5, 2.0, 2.0, 2.0, 1.5, -3.0, -3.0, -3.0]);
        (&y * &t64(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], &[2, 4])).sum().backward();
        assert_eq!(grad(&x), vec![1.0, 0.0, 9.0, 5.0, 0.0, 21.0]);
        let one = Tensor::from_vec_i64(vec![2], &[1]);
        assert_eq!(x.repeat_interleave_tensor(&one, 0).shape(), &[4, 3]);
        gradcheck(|t| t[0].repeat_interleave_tensor(&r, 1).exp(), &[x23().detach()]).unwrap();
    }

    #[test]
    #[should_panic(
        expected = "repeat_interleave: repeats must have the same size as input along dim 1, but got repeats.size(0) = 2 and input.size(1) = 3"
    )]
    fn repeat_interleave_tensor_wrong_length_panics() {
        x23().repeat_interleave_tensor(&Tensor::from_vec_i64(vec![1, 2], &[2]), 1);
    }

    #[test]
    #[should_panic(expected = "repeat_interleave: repeats can not be negative, got -1")]
    fn repeat_interleave_tensor_negative_panics() {
        x23().repeat_interleave_tensor(&Tensor::from_vec_i64(vec![1, -1, 0], &[3]), 1);
    }

    #[test]
    fn repeat_on_meta() {
        let m = Tensor::full_on(&[2, 3], 0.0, DType::F32, Device::Meta);
        assert_eq!(m.repeat(&[4, 1, 2]).shape(), &[4, 2, 6]);
        assert_eq!(m.repeat_interleave(3, 0).shape(), &[6, 3]);
    }
}
