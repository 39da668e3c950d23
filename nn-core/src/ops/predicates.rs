//! Elementwise predicates (`isnan`, `isinf`, `isfinite`) and boolean reductions (`any`,
//! `all`): `Bool` results, no gradient; plus [`Tensor::item_bool`] to read one.

use crate::dtype::DType;
use crate::shape::Dim;
use crate::tensor::Tensor;

/// `f(x)` for every element, as a `Bool` tensor of the same shape.
fn predicate(x: &Tensor, f: fn(f64) -> bool) -> Tensor {
    Tensor::from_storage(x.storage_arc().predicate(x.layout(), f), x.shape())
}

impl Tensor {
    /// `x != x` elementwise: true where the value is NaN (`torch.isnan`). Any dtype;
    /// integers and booleans are never NaN.
    ///
    /// ```
    /// use nn_core::{DType, Tensor};
    /// let x = Tensor::from_vec(vec![1.0, f32::NAN, f32::INFINITY], &[3]);
    /// assert_eq!(x.isnan().to_vec_bool(), vec![false, true, false]);
    /// assert_eq!(x.isnan().dtype(), DType::Bool);
    /// ```
    pub fn isnan(&self) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::ISNAN, &[self], &[], Vec::new);
        predicate(self, f64::is_nan)
    }

    /// True where the value is `+inf` or `-inf` (`torch.isinf`). Any dtype.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, f32::NAN, f32::NEG_INFINITY], &[3]);
    /// assert_eq!(x.isinf().to_vec_bool(), vec![false, false, true]);
    /// ```
    pub fn isinf(&self) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::ISINF, &[self], &[], Vec::new);
        predicate(self, f64::is_infinite)
    }

    /// True where the value is neither NaN nor infinite (`torch.isfinite`). Any dtype;
    /// integers and booleans are always finite.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, f32::NAN, f32::INFINITY], &[3]);
    /// assert_eq!(x.isfinite().to_vec_bool(), vec![true, false, false]);
    /// assert!(x.isfinite().any().item_bool() && !x.isfinite().all().item_bool());
    /// ```
    pub fn isfinite(&self) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::ISFINITE, &[self], &[], Vec::new);
        predicate(self, f64::is_finite)
    }

    /// True when any element is non-zero (`torch.any`): a 0-d `Bool` tensor. Any dtype (NaN
    /// counts as non-zero); `false` for an empty tensor.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// assert!(Tensor::from_vec(vec![0.0, 2.0], &[2]).any().item_bool());
    /// assert!(!Tensor::zeros(&[0]).any().item_bool());
    /// ```
    pub fn any(&self) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::ANY, &[self], &[], Vec::new);
        self.bool_reduce(None, false, false)
    }

    /// True when every element is non-zero (`torch.all`): a 0-d `Bool` tensor. Any dtype;
    /// `true` for an empty tensor.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3]);
    /// assert!(x.gt(&Tensor::scalar(0.0)).all().item_bool());
    /// assert!(!x.gt(&Tensor::scalar(1.0)).all().item_bool());
    /// ```
    pub fn all(&self) -> Tensor {
        let _op = crate::autograd::entry::enter_uncast(crate::names::ALL, &[self], &[], Vec::new);
        self.bool_reduce(None, false, true)
    }

    /// [`any`](Tensor::any) along one dimension (`torch.any(x, dim, keepdim)`): `[.., n, ..]`
    /// reduces to the shape without `dim` (or with it kept as 1).
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let m = Tensor::from_vec_bool(vec![true, false, false, false], &[2, 2]);
    /// assert_eq!(m.any_dim(1, false).to_vec_bool(), vec![true, false]);
    /// assert_eq!(m.any_dim(0, true).shape(), &[1, 2]);
    /// ```
    #[track_caller]
    pub fn any_dim<D: Dim>(&self, dim: D, keepdim: bool) -> Tensor {
        self.bool_reduce(Some(dim.resolve(self.rank(), "any")), keepdim, false)
    }

    /// [`all`](Tensor::all) along one dimension (`torch.all(x, dim, keepdim)`).
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec_i64(vec![1, 2, 0, 3], &[2, 2]);
    /// assert_eq!(x.all_dim(-1, false).to_vec_bool(), vec![true, false]);
    /// assert_eq!(x.all_dim(0, false).to_vec_bool(), vec![false, true]);
    /// ```
    #[track_caller]
    pub fn all_dim<D: Dim>(&self, dim: D, keepdim: bool) -> Tensor {
        self.bool_reduce(Some(dim.resolve(self.rank(), "all")), keepdim, true)
    }

    /// `any` (`all == false`) or `all` over every element, or along the resolved `dim`.
    fn bool_reduce(&self, dim: Option<usize>, keepdim: bool, all: bool) -> Tensor {
        let dim = dim.filter(|_| self.rank() > 0); // a 0-d tensor reduces as one element
        let oshape: Vec<usize> = match dim {
            None => vec![],
            Some(d) => (0..self.rank())
                .filter(|&i| i != d || keepdim)
                .map(|i| if i == d { 1 } else { self.shape()[i] })
                .collect(),
        };
        // Rows of the reduced extent: `dim` moved last (a view), or everything as one row.
        let b = self.to_dtype(DType::Bool);
        let (layout, n) = match dim {
            Some(d) => {
                let perm: Vec<usize> = (0..self.rank()).filter(|&i| i != d).chain([d]).collect();
                (b.layout().permute(&perm), self.shape()[d])
            }
            None => (b.layout().clone(), self.numel()),
        };
        let out_len = oshape.iter().product();
        Tensor::from_storage(b.storage_arc().bool_reduce(&layout, n, out_len, all), &oshape)
    }

    /// The single value of a one-element tensor as a `bool` (non-zero is `true`, as
    /// Python's `bool(t)`); the reading end of [`any`](Tensor::any), [`all`](Tensor::all) and
    /// the comparisons.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, f32::NAN], &[2]);
    /// assert!(x.isnan().any().item_bool());
    /// assert!(!Tensor::from_vec_bool(vec![false], &[1, 1]).item_bool());
    /// ```
    ///
    /// # Panics
    /// When the tensor does not hold exactly one element, or is on the meta device.
    #[track_caller]
    pub fn item_bool(&self) -> bool {
        crate::autograd::trace::on_access(crate::autograd::trace::OpKind::HostRead, "item_bool", self);
        if self.numel() != 1 {
            panic!(
                "item_bool: a tensor with {} elements (shape {:?}) cannot be converted to a scalar",
                self.numel(),
                self.shape()
            );
        }
        self.to_vec_bool()[0]
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::support::{leaf, t64};
    use crate::{DType, Device, Tensor};

    const NAN: f64 = f64::NAN;
    const INF: f64 = f64::INFINITY;

    #[test]
    fn isnan_isinf_isfinite_forward_on_every_dtype() {
        let x = t64(&[1.0, NAN, INF, -INF, 0.0, -2.5], &[2, 3]);
        assert_eq!(x.isnan().to_vec_bool(), vec![false, true, false, false, false, false]);
        assert_eq!(x.isinf().to_vec_bool(), vec![false, false, true, true, false, false]);
        assert_eq!(x.isfinite().to_vec_bool(), vec![true, false, false, false, true, true]);
        for y in [x.isnan(), x.isinf(), x.isfinite()] {
            assert_eq!((y.dtype(), y.shape()), (DType::Bool, &[2, 3][..]));
        }
        for d in [DType::F32, DType::F16, DType::BF16] {
            let h = x.to_dtype(d);
            assert_eq!(h.isnan().to_vec_bool(), x.isnan().to_vec_bool(), "{d}");
            assert_eq!(h.isinf().to_vec_bool(), x.isinf().to_vec_bool(), "{d}");
        }
        let i = Tensor::from_vec_i64(vec![i64::MAX, i64::MIN], &[2]);
        assert_eq!((i.isnan().to_vec_bool(), i.isinf().to_vec_bool()), (vec![false; 2], vec![false; 2]));
        assert_eq!(i.isfinite().to_vec_bool(), vec![true; 2]);
        assert_eq!(Tensor::from_vec_bool(vec![true], &[]).isfinite().to_vec_bool(), vec![true]);
        // Strided input: the transpose of x.
        assert_eq!(x.t().isnan().to_vec_bool(), vec![false, false, true, false, false, false]);
    }

    #[test]
    fn predicates_cut_the_graph() {
        let x = leaf(&[1.0, NAN], &[2]);
        for y in [x.isnan(), x.isinf(), x.isfinite(), x.any(), x.all_dim(0, false)] {
            assert!(!y.requires_grad() && y.is_leaf());
        }
    }

    #[test]
    fn any_and_all_over_every_element() {
        let cases: [(Tensor, bool, bool); 7] = [
            (Tensor::from_vec_bool(vec![false, true, false], &[3]), true, false),
            (Tensor::from_vec_bool(vec![true, true], &[2, 1]), true, true),
            (t64(&[0.0, 0.0], &[2]), false, false),
            (t64(&[NAN, 1.0], &[2]), true, true),
            (Tensor::from_vec_i64(vec![3, 0, -1], &[3]), true, false),
            (Tensor::zeros(&[0, 2]), false, true),
            (Tensor::from_vec(vec![-1.0], &[]), true, true),
        ];
        for (i, (x, any, all)) in cases.into_iter().enumerate() {
            let (a, l) = (x.any(), x.all());
            assert_eq!(
                (a.shape(), a.dtype(), l.shape(), l.dtype()),
                (&[] as &[usize], DType::Bool, &[] as &[usize], DType::Bool)
            );
            assert_eq!((a.item_bool(), l.item_bool()), (any, all), "case {i}");
        }
    }

    #[test]
    fn any_dim_and_all_dim() {
        // [[[T, F], [F, F], [T, T]], [[F, F], [T, F], [T, T]]]
        let v = [true, false, false, false, true, true, false, false, true, false, true, true];
        let x = Tensor::from_vec_bool(v.to_vec(), &[2, 3, 2]);
        assert_eq!(x.any_dim(2, false).to_vec_bool(), vec![true, false, true, false, true, true]);
        assert_eq!(x.all_dim(-1, false).to_vec_bool(), vec![false, false, true, false, false, true]);
        assert_eq!(x.any_dim(1, true).to_vec_bool(), vec![true, true, true, true]);
        assert_eq!(x.any_dim(1, true).shape(), &[2, 1, 2]);
        assert_eq!(x.all_dim(0, false).to_vec_bool(), vec![false, false, false, false, true, true]);
        assert_eq!(x.all_dim(0, false).shape(), &[3, 2]);
        // A strided float view reduces the same as its contiguous copy.
        let f = t64(&[1.0, 0.0, 2.0, 3.0, 0.0, 0.0], &[3, 2]).t(); // [[1, 2, 0], [0, 3, 0]]
        assert_eq!(f.any_dim(1, false).to_vec_bool(), vec![true, true]);
        assert_eq!(f.all_dim(0, false).to_vec_bool(), vec![false, true, false]);
        assert_eq!(f.contiguous().all_dim(0, false).to_vec_bool(), vec![false, true, false]);
        // Empty reduced dims give the identities; empty kept dims give empty results.
        let e = Tensor::zeros(&[2, 0]);
        assert_eq!(
            (e.any_dim(1, false).to_vec_bool(), e.all_dim(1, false).to_vec_bool()),
            (vec![false; 2], vec![true; 2])
        );
        assert_eq!(e.any_dim(0, true).shape(), &[1, 0]);
        // 0-d: dim 0 or -1 reduces the one element.
        let s = Tensor::from_vec_i64(vec![5], &[]);
        assert_eq!((s.any_dim(0, true).shape(), s.all_dim(-1, false).item_bool()), (&[] as &[usize], true));
    }

    #[test]
    fn predicates_and_reductions_on_meta_give_shapes() {
        let m = Tensor::full_on(&[2, 3], 0.0, DType::F32, Device::Meta);
        for y in [m.isnan(), m.isinf(), m.isfinite()] {
            assert_eq!((y.shape(), y.dtype(), y.device()), (&[2, 3][..], DType::Bool, Device::Meta));
        }
        assert_eq!((m.any().shape(), m.all().device()), (&[] as &[usize], Device::Meta));
        assert_eq!(m.any_dim(1, true).shape(), &[2, 1]);
        assert_eq!(m.all_dim(0, false).shape(), &[3]);
    }

    #[test]
    #[should_panic(expected = "any: dimension 2 out of range for a tensor of rank 2 (expected -2..=1)")]
    fn any_dim_out_of_range_names_the_op() {
        Tensor::zeros(&[2, 3]).any_dim(2, false);
    }

    #[test]
    #[should_panic(expected = "all: dimension -3 out of range for a tensor of rank 2 (expected -2..=1)")]
    fn all_dim_out_of_range_names_the_op() {
        Tensor::zeros(&[2, 3]).all_dim(-3, true);
    }

    #[test]
    #[should_panic(expected = "item_bool: a tensor with 2 elements (shape [2]) cannot be converted to a scalar")]
    fn item_bool_of_a_vector_panics() {
        Tensor::from_vec_bool(vec![true, false], &[2]).item_bool();
    }
}
