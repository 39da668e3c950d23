//! Devices: where a tensor's values live.

use std::fmt;

/// Where a tensor's values live.
///
/// `Meta` tensors carry a shape and a dtype but no values: every op computes the output
/// shape and dtype without allocating, so a model of any size can be built and inspected
/// (parameter count, state-dict schema) in O(1) memory and materialised later. Reading
/// values (`to_vec`, `item`) from a meta tensor panics with a message saying so.
///
/// Storage is an enum behind this tag, so another backend adds a variant here and in
/// `storage.rs` without touching modules. Ops never copy silently between devices: mixing
/// devices in one op panics and names both.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Device {
    /// Host memory; kernels run on the CPU.
    #[default]
    Cpu,
    /// Shapes and dtypes only, no storage.
    Meta,
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Device::Cpu => "cpu",
            Device::Meta => "meta",
        })
    }
}
