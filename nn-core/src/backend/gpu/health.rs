//! When a device can no longer be trusted: it was lost (the driver's reason, or
//! [`crate::gpu::lose_device`]), or wgpu reported an error outside an error scope, which
//! loses the work recorded with it (up to [`super::batch::MAX_LAUNCHES`] launches that never
//! run, their outputs left holding stale pool data, their index checks never read). Either
//! is sticky, as a CUDA error is in PyTorch: every later record, allocation and read on the
//! device panics naming it and why, and what its batch held is dropped.
//!
//! This file installs wgpu's callbacks and keeps what they report; the context reads it
//! ([`Ctx::check_alive`](super::context::Ctx::check_alive) and its neighbours).

use std::sync::{Arc, Mutex};

use super::lock;

/// Why a device cannot be used, once it cannot; shared with wgpu's callbacks.
pub(crate) type Sticky = Arc<Mutex<Option<String>>>;

/// Installs wgpu's callbacks on the device of `gpu:ordinal` (adapter `name`); returns where
/// they keep the loss's reason and the first error reported outside an error scope.
///
/// Such an error panics at once too, naming the device, and the loss when that is the
/// cause (wgpu's own handler panics with its message alone). The panic unwinds through the
/// call that reported it, often with the batch's lock held ([`super::batch::Recording`],
/// which then drops the batch).
pub(crate) fn watch(device: &wgpu::Device, ordinal: usize, name: &str) -> (Sticky, Sticky) {
    let (lost, failed) = (Sticky::default(), Sticky::default());
    let seen = lost.clone();
    device.set_device_lost_callback(move |reason, message| {
        lock(&seen).get_or_insert_with(|| format!("{reason:?}: {message}"));
    });
    let (seen, kept, name) = (lost.clone(), failed.clone(), name.to_string());
    device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
        // Kept before the panic, so that whatever the unwinding runs sees it.
        lock(&kept).get_or_insert_with(|| e.to_string().trim_end().to_string());
        match lock(&seen).as_ref() {
            Some(why) => panic!("gpu:{ordinal} (`{name}`) was lost: {why} (then: {e})"),
            None => panic!(
                "gpu:{ordinal} (`{name}`): {e} (the work recorded with it is lost: every later use of gpu:{ordinal} \
                 fails)"
            ),
        }
    }));
    (lost, failed)
}
