//! A [`GradScaler`](super::GradScaler)'s settings ([`GradScalerConfig`]) and its resumable
//! state ([`GradScalerState`]), with the checks both pass.

use serde::{Deserialize, Serialize};

use super::MIN_SCALE;
use crate::error::{Error, Result};

/// Settings of a [`GradScaler`](super::GradScaler): PyTorch's constructor arguments, with its defaults.
///
/// ```
/// use nn_core::amp::{GradScaler, GradScalerConfig};
/// let c = GradScalerConfig::default();
/// assert_eq!((c.init_scale, c.growth_factor, c.backoff_factor, c.growth_interval, c.enabled), (65536.0, 2.0, 0.5, 2000, true));
/// let scaler = GradScaler::with_config(GradScalerConfig { init_scale: 1024.0, growth_interval: 100, ..Default::default() });
/// assert_eq!(scaler.get_scale(), 1024.0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GradScalerConfig {
    /// The scale to start from (default 2^16 = 65536). Held as an `f32`, as PyTorch holds
    /// it: it must be a finite, positive, normal `f32`.
    pub init_scale: f64,
    /// Multiplies the scale after `growth_interval` consecutive iterations without inf or
    /// NaN gradients (default 2; finite and greater than 1).
    pub growth_factor: f64,
    /// Multiplies the scale after an iteration whose gradients held inf or NaN (default
    /// 0.5; in (0, 1)).
    pub backoff_factor: f64,
    /// Consecutive clean iterations before the scale grows (default 2000; at least 1).
    pub growth_interval: u64,
    /// When false, the scaler passes everything through: [`GradScaler::scale`](super::GradScaler::scale) returns the
    /// loss, [`GradScaler::step`](super::GradScaler::step) steps, the rest does nothing (default true). Lets one
    /// training loop run with and without mixed precision.
    pub enabled: bool,
}

impl Default for GradScalerConfig {
    fn default() -> Self {
        GradScalerConfig {
            init_scale: 65536.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
            enabled: true,
        }
    }
}

/// What a resumed run needs of a [`GradScaler`](super::GradScaler), under PyTorch's `state_dict()` key names
/// (`scale`, `growth_factor`, `backoff_factor`, `growth_interval`, `_growth_tracker`): the
/// form it takes in a [`Checkpoint`](crate::checkpoint::Checkpoint)'s metadata.
///
/// ```
/// use nn_core::amp::{GradScaler, GradScalerState};
/// let state = GradScaler::new().state_dict();
/// assert_eq!(state, GradScalerState { scale: 65536.0, growth_factor: 2.0, backoff_factor: 0.5, growth_interval: 2000, growth_tracker: 0 });
/// let json = serde_json::to_string(&state).unwrap();
/// assert_eq!(json, r#"{"scale":65536.0,"growth_factor":2.0,"backoff_factor":0.5,"growth_interval":2000,"_growth_tracker":0}"#);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GradScalerState {
    /// The current scale.
    pub scale: f64,
    /// See [`GradScalerConfig::growth_factor`].
    pub growth_factor: f64,
    /// See [`GradScalerConfig::backoff_factor`].
    pub backoff_factor: f64,
    /// See [`GradScalerConfig::growth_interval`].
    pub growth_interval: u64,
    /// Consecutive clean iterations since the scale last changed (PyTorch's
    /// `_growth_tracker`): always less than `growth_interval`.
    #[serde(rename = "_growth_tracker")]
    pub growth_tracker: u64,
}

impl GradScalerState {
    /// Checks that a scaler can hold this state: the settings as [`GradScalerConfig`]
    /// requires them, and a growth tracker below the growth interval (one at or past it
    /// would never reach the interval again, and the scale would never grow).
    ///
    /// ```
    /// use nn_core::amp::GradScaler;
    /// let mut state = GradScaler::new().state_dict();
    /// state.scale = f64::NAN;
    /// let e = state.check().unwrap_err();
    /// assert!(e.to_string().starts_with("grad scaler state: `scale` is NaN"), "{e}");
    /// ```
    ///
    /// # Errors
    /// [`Error::GradScalerState`] naming the first offending field.
    pub fn check(&self) -> Result<()> {
        check_settings("scale", self.scale, self.growth_factor, self.backoff_factor, self.growth_interval)
            .map_err(|(key, reason)| Error::GradScalerState { key, reason })?;
        if self.growth_tracker >= self.growth_interval {
            return Err(Error::GradScalerState {
                key: "_growth_tracker",
                reason: format!(
                    "is {}; it counts clean iterations since the scale last changed, so it is less than \
                     `growth_interval` ({})",
                    self.growth_tracker, self.growth_interval
                ),
            });
        }
        Ok(())
    }
}

/// Why `v` cannot be a scale, if it cannot.
pub(super) fn scale_problem(v: f64) -> Option<String> {
    // Rounded as PyTorch rounds it into its float32 scale tensor.
    let s = v as f32;
    (!(s.is_finite() && s >= MIN_SCALE))
        .then(|| format!("is {v:?}; a scale is a finite positive normal f32 (from {MIN_SCALE:e} to {:e})", f32::MAX))
}

/// The first invalid setting among those a config and a state share, as `(key, reason)`.
pub(super) fn check_settings(
    scale_key: &'static str,
    scale: f64,
    growth_factor: f64,
    backoff_factor: f64,
    growth_interval: u64,
) -> std::result::Result<(), (&'static str, String)> {
    if let Some(reason) = scale_problem(scale) {
        return Err((scale_key, reason));
    }
    if !(growth_factor.is_finite() && growth_factor > 1.0) {
        return Err(("growth_factor", format!("is {growth_factor:?}; it must be finite and greater than 1")));
    }
    if !(backoff_factor > 0.0 && backoff_factor < 1.0) {
        return Err(("backoff_factor", format!("is {backoff_factor:?}; it must be in (0, 1)")));
    }
    if growth_interval == 0 {
        return Err(("growth_interval", "is 0; it must be at least 1".to_string()));
    }
    Ok(())
}
