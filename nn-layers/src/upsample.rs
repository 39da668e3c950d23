//! `Upsample`: resampling of the spatial dims as a layer.

use nn_core::functional::interpolate;
use nn_core::ops::{InterpolateMode, InterpolateSize};
use nn_core::{Compute, ExtraRepr, Module, ModuleBase, Tensor};

use crate::repr::{py_float, py_tuple};

/// Options of [`Upsample`], PyTorch's keyword arguments: exactly one of `size` and
/// `scale_factor` (one value for every spatial dim, or one per dim), the `mode`
/// (nearest by default) and `align_corners` (linear modes only; `None` means `false`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UpsampleConfig {
    /// The output's spatial size.
    pub size: Option<Vec<usize>>,
    /// Multipliers of the input's spatial size (the output size rounds down).
    pub scale_factor: Option<Vec<f64>>,
    /// The resampling rule.
    pub mode: InterpolateMode,
    /// Whether the corner pixels of input and output align (linear modes).
    pub align_corners: Option<bool>,
}

/// Upsamples `[N, C, L]` or `[N, C, H, W]` inputs to a size or by a scale factor
/// (PyTorch's `nn.Upsample`; no parameters, no buffers). The forward is
/// [`interpolate`](nn_core::functional::interpolate) with the layer's options; see there
/// for the formulas.
///
/// ```
/// use nn_core::ops::{InterpolateMode, InterpolateSize};
/// use nn_core::{Forward, Tensor};
/// use nn_layers::Upsample;
/// let up = Upsample::new(InterpolateSize::ScaleFactor(vec![2.0]), InterpolateMode::Nearest);
/// assert_eq!(up.to_string(), "Upsample(scale_factor=2.0, mode='nearest')");
/// let y = up.forward(&Tensor::from_vec(vec![1.0, 2.0], &[1, 1, 1, 2]));
/// assert_eq!(y.shape(), &[1, 1, 2, 4]);
/// assert_eq!(y.to_vec(), vec![1.0, 1.0, 2.0, 2.0, 1.0, 1.0, 2.0, 2.0]);
/// ```
#[derive(Module)]
#[module(extra_repr)]
pub struct Upsample {
    #[base]
    base: ModuleBase,
    size: InterpolateSize,
    mode: InterpolateMode,
    align_corners: Option<bool>,
}

impl Upsample {
    /// Resamples to `size` (a size or a scale factor) with `mode`; `align_corners` unset.
    pub fn new(size: InterpolateSize, mode: InterpolateMode) -> Self {
        Upsample { base: ModuleBase::default(), size, mode, align_corners: None }
    }

    /// All options, as PyTorch's keyword arguments.
    ///
    /// # Panics
    /// When both or neither of `size` and `scale_factor` are given, or `align_corners`
    /// is set for the nearest mode.
    #[track_caller]
    pub fn with_config(config: UpsampleConfig) -> Self {
        let size = match (config.size, config.scale_factor) {
            (Some(s), None) => InterpolateSize::Size(s),
            (None, Some(f)) => InterpolateSize::ScaleFactor(f),
            (Some(s), Some(f)) => panic!(
                "Upsample: only one of size or scale_factor should be defined, got size {s:?} and scale_factor {f:?}"
            ),
            (None, None) => panic!("Upsample: either size or scale_factor should be defined"),
        };
        if !config.mode.takes_align_corners() && config.align_corners.is_some() {
            panic!(
                "Upsample: align_corners option can only be set with the interpolating modes: linear | bilinear | bicubic (got mode {})",
                config.mode
            );
        }
        Upsample { base: ModuleBase::default(), size, mode: config.mode, align_corners: config.align_corners }
    }
}

impl ExtraRepr for Upsample {
    /// PyTorch's: the scale factor (floats) or the size, then the mode.
    fn extra_repr(&self) -> String {
        let what = match &self.size {
            InterpolateSize::ScaleFactor(f) => match f.as_slice() {
                [one] => format!("scale_factor={}", py_float(*one)),
                _ => format!("scale_factor=({})", f.iter().map(|&v| py_float(v)).collect::<Vec<_>>().join(", ")),
            },
            InterpolateSize::Size(s) => match s.as_slice() {
                [one] => format!("size={one}"),
                _ => format!("size={}", py_tuple(s)),
            },
        };
        format!("{what}, mode='{}'", self.mode)
    }
}

impl Compute for Upsample {
    type Input = Tensor;
    type Output = Tensor;
    fn compute(&self, x: &Tensor) -> Tensor {
        interpolate(x, self.size.clone(), self.mode, self.align_corners)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nn_core::Forward;

    #[test]
    fn reprs_match_pytorch() {
        // repr(nn.Upsample(...)) in PyTorch 2.x.
        let sf = |v: Vec<f64>, mode| Upsample::new(InterpolateSize::ScaleFactor(v), mode).to_string();
        assert_eq!(sf(vec![2.0], InterpolateMode::Nearest), "Upsample(scale_factor=2.0, mode='nearest')");
        assert_eq!(sf(vec![2.0, 1.5], InterpolateMode::Bilinear), "Upsample(scale_factor=(2.0, 1.5), mode='bilinear')");
        let cfg = UpsampleConfig {
            size: Some(vec![4, 6]),
            mode: InterpolateMode::Bilinear,
            align_corners: Some(true),
            ..Default::default()
        };
        assert_eq!(Upsample::with_config(cfg).to_string(), "Upsample(size=(4, 6), mode='bilinear')");
        let five = Upsample::new(InterpolateSize::Size(vec![5]), InterpolateMode::Nearest);
        assert_eq!(five.to_string(), "Upsample(size=5, mode='nearest')");
    }

    #[test]
    fn no_parameters_and_forward_uses_the_options() {
        let cfg = UpsampleConfig {
            size: Some(vec![3]),
            mode: InterpolateMode::Linear,
            align_corners: Some(true),
            ..Default::default()
        };
        let up = Upsample::with_config(cfg);
        assert_eq!(up.num_parameters(), 0);
        assert!(up.state_dict().is_empty());
        let y = up.forward(&Tensor::from_vec(vec![0.0, 4.0], &[1, 1, 2]));
        assert_eq!(y.to_vec(), vec![0.0, 2.0, 4.0]);
    }

    #[test]
    #[should_panic(expected = "Upsample: only one of size or scale_factor should be defined")]
    fn size_and_scale_factor_panics() {
        Upsample::with_config(UpsampleConfig {
            size: Some(vec![2]),
            scale_factor: Some(vec![2.0]),
            ..Default::default()
        });
    }

    #[test]
    #[should_panic(expected = "Upsample: either size or scale_factor should be defined")]
    fn neither_size_nor_scale_factor_panics() {
        Upsample::with_config(UpsampleConfig::default());
    }

    #[test]
    #[should_panic(expected = "Upsample: align_corners option can only be set with the interpolating modes")]
    fn align_corners_with_nearest_panics() {
        Upsample::with_config(UpsampleConfig {
            scale_factor: Some(vec![2.0]),
            align_corners: Some(false),
            ..Default::default()
        });
    }
}
