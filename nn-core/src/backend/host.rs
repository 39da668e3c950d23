//! What a device backend may use of the host: the CPU storage type and the host-path
//! helpers.
//!
//! A device backend (`gpu`) moves values to and from the host, and runs the interface
//! methods it has no kernel for on host copies of its operands (the host path). This
//! module is everything of the CPU backend it reaches for; the device modules import
//! nothing from `cpu` directly (`.ci/import_cycles.py` checks it), so the CPU backend's
//! kernels, layouts of work and helper traits stay free to change.

/// The host buffer: what a device buffer is read back into and uploaded from, and what
/// the host path computes on.
pub(crate) use super::cpu::CpuStorage;

/// The elements a layout selects, row-major and little-endian (the safetensors encoding,
/// which device buffers share except for `bool`).
pub(crate) use super::cpu::bytes::le_bytes;

/// The elements a layout selects from a host slice, row-major (for `bool`, which a device
/// buffer holds as a word per element).
pub(crate) use super::cpu::strided_to_vec;

/// Writes row-major values into the positions a layout selects in a host buffer of the
/// same dtype (the host path of an in-place write).
pub(crate) use super::cpu::scatter_into;
