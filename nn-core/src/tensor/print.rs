//! Printing: PyTorch-style `Display` and a short `Debug`, and small conversions.

use std::fmt;

use half::{bf16, f16};

use crate::device::Device;
use crate::dtype::DType;

use super::Tensor;

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// PyTorch-style printout: `tensor([[1.0000, 2.0000], ...], dtype=f64, requires_grad=true)`.
/// Large tensors show their first and last three entries per dimension.
impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut extras = Vec::new();
        if self.device() == Device::Meta {
            write!(f, "tensor(..., size={:?}", self.shape())?;
            extras.push("device=meta".to_string());
        } else {
            f.write_str("tensor(")?;
            let vals = self.to_vec_f64();
            let dtype = self.dtype();
            let fmt_v = |v: f64| -> String {
                match dtype {
                    DType::I64 => format!("{}", v as i64),
                    DType::Bool => format!("{}", v != 0.0),
                    _ => format!("{v:.4}"),
                }
            };
            let strides = crate::shape::contiguous_strides(self.shape());
            fn rec(
                f: &mut fmt::Formatter<'_>,
                vals: &[f64],
                shape: &[usize],
                strides: &[usize],
                base: usize,
                depth: usize,
                fmt_v: &dyn Fn(f64) -> String,
            ) -> fmt::Result {
                if shape.is_empty() {
                    return f.write_str(&fmt_v(vals[base]));
                }
                f.write_str("[")?;
                let n = shape[0];
                let elide = n > 6 && vals.len() > 1000;
                let idx: Vec<Option<usize>> = if elide {
                    (0..3).map(Some).chain([None]).chain((n - 3..n).map(Some)).collect()
                } else {
                    (0..n).map(Some).collect()
                };
                for (k, i) in idx.iter().enumerate() {
                    if k > 0 {
                        if shape.len() > 1 {
                            write!(f, ",\n{}", " ".repeat(depth + 8))?;
                        } else {
                            f.write_str(", ")?;
                        }
                    }
                    match i {
                        Some(i) => rec(f, vals, &shape[1..], &strides[1..], base + i * strides[0], depth + 1, fmt_v)?,
                        None => f.write_str("...")?,
                    }
                }
                f.write_str("]")
            }
            rec(f, &vals, self.shape(), &strides, 0, 0, &fmt_v)?;
            if dtype != DType::F32 {
                extras.push(format!("dtype={dtype}"));
            }
        }
        if let Some(n) = self.grad_fn_name() {
            extras.push(format!("grad_fn={n}"));
        } else if self.requires_grad() {
            extras.push("requires_grad=true".to_string());
        }
        for e in extras {
            write!(f, ", {e}")?;
        }
        f.write_str(")")
    }
}

// Element conversions used by tests and docs.
impl From<f32> for Tensor {
    fn from(v: f32) -> Self {
        Tensor::scalar(v)
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Tensor>();
    let _ = (f16::ZERO, bf16::ZERO);
}
