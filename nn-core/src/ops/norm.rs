//! Layer normalisation and batch normalisation, composed from differentiable primitives
//! (so their gradients are exact by construction and covered by the primitives' checks).

use crate::autograd::no_grad;
use crate::tensor::Tensor;

impl Tensor {
    /// Layer normalisation over the trailing `normalized_shape` dims:
    /// `(x - mean) / sqrt(var + eps) * weight + bias` with the biased variance, as
    /// PyTorch's `F.layer_norm`.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let y = Tensor::from_vec(vec![1.0, 3.0], &[1, 2]).layer_norm(&[2], None, None, 0.0);
    /// assert_eq!(y.to_vec(), vec![-1.0, 1.0]);
    /// ```
    #[track_caller]
    pub fn layer_norm(
        &self,
        normalized_shape: &[usize],
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
    ) -> Tensor {
        let r = self.rank();
        let k = normalized_shape.len();
        if k == 0 || k > r || self.shape()[r - k..] != *normalized_shape {
            panic!(
                "layer_norm: input of shape {:?} does not end with normalized_shape {:?}",
                self.shape(),
                normalized_shape
            );
        }
        for (name, p) in [("weight", weight), ("bias", bias)] {
            if let Some(p) = p {
                if p.shape() != normalized_shape {
                    panic!("layer_norm: {name} of shape {:?} for normalized_shape {:?}", p.shape(), normalized_shape);
                }
            }
        }
        let dims: Vec<usize> = (r - k..r).collect();
        let mean = self.mean_dims(&dims, true);
        let centered = self - &mean;
        let var = centered.square().mean_dims(&dims, true);
        let mut y = &centered * &(var + eps).sqrt().recip();
        if let Some(w) = weight {
            y = &y * w;
        }
        if let Some(b) = bias {
            y = &y + b;
        }
        y
    }

    /// Batch normalisation over `[N, C, ...]`, per channel `C`.
    ///
    /// In training (or without running statistics) the batch mean and biased variance
    /// normalise the input, and the running statistics, when given, are updated in place:
    /// `running = (1 - momentum) * running + momentum * batch` with the *unbiased* batch
    /// variance, as PyTorch. In evaluation the running statistics normalise the input.
    ///
    /// ```
    /// use nn_core::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 3.0], &[2, 1]);
    /// let (rm, rv) = (Tensor::zeros(&[1]), Tensor::ones(&[1]));
    /// let y = x.batch_norm(Some(&rm), Some(&rv), None, None, true, 0.1, 0.0);
    /// assert_eq!(y.to_vec(), vec![-1.0, 1.0]);
    /// assert!((rm.to_vec()[0] - 0.2).abs() < 1e-6); // 0.9 * 0 + 0.1 * 2
    /// assert!((rv.to_vec()[0] - 1.1).abs() < 1e-6); // 0.9 * 1 + 0.1 * 2 (unbiased)
    /// ```
    #[allow(clippy::too_many_arguments)]
    #[track_caller]
    pub fn batch_norm(
        &self,
        running_mean: Option<&Tensor>,
        running_var: Option<&Tensor>,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        training: bool,
        momentum: f64,
        eps: f64,
    ) -> Tensor {
        const OP: &str = "batch_norm";
        if self.rank() < 2 {
            panic!("{OP}: expected an input of at least 2 dims [N, C, ...], got shape {:?}", self.shape());
        }
        let c = self.shape()[1];
        for (name, t) in
            [("running_mean", running_mean), ("running_var", running_var), ("weight", weight), ("bias", bias)]
        {
            if let Some(t) = t {
                if t.shape() != [c] {
                    panic!(
                        "{OP}: {name} of shape {:?} for an input with {c} channels (shape {:?})",
                        t.shape(),
                        self.shape()
                    );
                }
            }
        }
        if !training
            && (running_mean.is_none() || running_var.is_none())
            && (running_mean.is_some() || running_var.is_some())
        {
            panic!("{OP}: running_mean and running_var must both be given or both be absent");
        }
        let mut bshape = vec![1; self.rank()];
        bshape[1] = c;
        let dims: Vec<usize> = (0..self.rank()).filter(|&d| d != 1).collect();
        let per_channel = self.numel() / c.max(1);
        let use_batch = training || running_mean.is_none();
        let y = if use_batch {
            if training && per_channel <= 1 {
                panic!(
                    "{OP}: expected more than 1 value per channel when training, got input of shape {:?}",
                    self.shape()
                );
            }
            let mean = self.mean_dims(&dims, true);
            let centered = self - &mean;
            let var = centered.square().mean_dims(&dims, true);
            if let (true, Some(rm), Some(rv)) = (training, running_mean, running_var) {
                no_grad(|| {
                    let n = per_channel as f64;
                    let unbiased = var.reshape(&[c]) * (n / (n - 1.0).max(1.0));
                    rm.copy_(&(rm * (1.0 - momentum) + mean.reshape(&[c]) * momentum));
                    rv.copy_(&(rv * (1.0 - momentum) + unbiased * momentum));
                });
            }
            &centered * &(var + eps).sqrt().recip()
        } else {
            let rm = running_mean.expect("checked").reshape(&bshape);
            let rv = running_var.expect("checked").reshape(&bshape);
            (self - &rm) * (rv + eps).sqrt().recip()
        };
        let mut y = y;
        if let Some(w) = weight {
            y = &y * &w.reshape(&bshape);
        }
        if let Some(b) = bias {
            y = &y + &b.reshape(&bshape);
        }
        y
    }
}
