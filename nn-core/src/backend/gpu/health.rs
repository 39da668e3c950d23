//! When a device can no longer be trusted: it was lost (the driver's reason, or
//! [`crate::gpu::lose_device`]), or wgpu reported an error outside an error scope, which
//! loses the work recorded with it (up to [`super::batch::MAX_LAUNCHES`] launches that never
//! run, their outputs left holding stale pool data, their index checks never read). Either
//! is sticky, as a CUDA error is in PyTorch: every later record, allocation and read on the
//! device panics naming it and why, and what its batch held is dropped.

use std::sync::{Arc, Mutex, TryLockError};

use super::context::{lock, Ctx};

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

impl Ctx {
    /// Panics naming the device when it cannot be used (see the module docs). What the
    /// batch holds can never be submitted then: it is dropped first, unless a thread is
    /// recording into it (this one included), whose [`super::batch::Recording`] drops it
    /// as that thread's panic unwinds.
    pub(crate) fn check_alive(&self) {
        if let Err(e) = self.alive() {
            let batch = match self.batch.try_lock() {
                Ok(b) => Some(b),
                Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
                Err(TryLockError::WouldBlock) => None,
            };
            if let Some(mut b) = batch {
                b.discard();
            }
            panic!("{e}");
        }
    }

    /// `Err` naming the device, the adapter and why, once the device was lost or an error
    /// lost work recorded on it.
    pub(crate) fn alive(&self) -> Result<(), String> {
        if let Some(why) = lock(&self.lost).as_ref() {
            return Err(format!("gpu:{} (`{}`) was lost: {why}", self.ordinal, self.info.name));
        }
        match lock(&self.failed).as_ref() {
            Some(e) => Err(format!(
                "gpu:{} (`{}`): {e} (an earlier error lost recorded work; the device's results cannot be trusted)",
                self.ordinal, self.info.name
            )),
            None => Ok(()),
        }
    }

    /// Makes the device unusable after a failure that lost work the host was waiting for
    /// (a read's values and the index checks it took), and panics naming it.
    pub(crate) fn fail(&self, why: String) -> ! {
        self.check_alive(); // a loss, when that is the cause, is named as one
        lock(&self.failed).get_or_insert_with(|| why.clone());
        let (gpu, name) = (self.ordinal, &self.info.name);
        panic!("gpu:{gpu} (`{name}`): {why} (the work it waited for is lost: every later use of gpu:{gpu} fails)")
    }

    /// Destroys the device (fault injection, [`crate::gpu::lose_device`]): the recorded
    /// batch is dropped unsubmitted and every later use panics through
    /// [`check_alive`](Ctx::check_alive).
    pub(crate) fn lose(&self) {
        let mut b = lock(&self.batch);
        b.discard();
        // The reason first, so that whatever fails from here on names the loss (wgpu's
        // lost callback keeps the first reason).
        lock(&self.lost).get_or_insert_with(|| "destroyed by nn_core::gpu::lose_device".to_string());
        self.device.destroy();
        drop(b);
    }
}
