//! The work recorded on a context and not yet submitted: one command encoder with one open
//! compute pass, the parameter arena's contents, and the index checks waiting for the next
//! host read (see [`super::context`]); it is recorded under a
//! [`Recording`](super::record::Recording) and submitted by the context.

use super::GpuStorage;
use crate::backend::host::CpuStorage;
use crate::shape::Layout;

/// Launches per submission: the batch is submitted when it holds this many, so the device
/// starts on a long step while the host records the rest (a training step of a small
/// Transformer layer is about 150 launches: three submissions).
pub(crate) const MAX_LAUNCHES: u32 = 64;

/// An index check recorded on the device, with what its report needs.
pub(crate) struct Check {
    /// The op that checked (`index_select`, `gather`, ...).
    pub(crate) op: String,
    pub(crate) dim: usize,
    pub(crate) size: usize,
    /// The indices (shared, not copied) and the layout they were read through.
    pub(crate) index: GpuStorage,
    pub(crate) layout: Layout,
    /// Buffers the op wrote (what a failure marks first).
    pub(crate) writes: Vec<u64>,
    /// The sequence number of the check's launch.
    pub(crate) launch: u64,
    /// The thread that recorded it (the report goes to its next host read).
    pub(crate) thread: std::thread::ThreadId,
}

impl Check {
    /// The index value at row-major position `pos`, from `values`, the index's buffer read
    /// back (only when reporting, without the checks' bookkeeping, as the index may be
    /// marked by a report: `self.index.to_cpu_raw()`, shared by the checks of one buffer).
    pub(crate) fn value_at(&self, values: &CpuStorage, pos: usize) -> i64 {
        values.to_vec_of::<i64>(&self.layout)[pos]
    }
}

/// See the module docs.
#[derive(Default)]
pub(crate) struct Batch {
    pub(super) encoder: Option<wgpu::CommandEncoder>,
    pub(super) pass: Option<wgpu::ComputePass<'static>>,
    /// The arena's contents for this submission.
    pub(super) params: Vec<u8>,
    pub(super) launches: u32,
    /// Launches recorded on this context so far.
    pub(super) seq: u64,
    pub(super) checks: Vec<Check>,
    /// Since the first unread check: each launch's bound buffers (reads, `u64::MAX`,
    /// writes).
    pub(super) log: Vec<(u64, Vec<u64>)>,
    /// Host reads waiting for the checks they took: launches stay logged until those
    /// checks' failures are marked.
    pub(crate) resolving: u32,
}

impl Batch {
    pub(crate) fn checks_len(&self) -> usize {
        self.checks.len()
    }

    pub(crate) fn take_checks(&mut self) -> Vec<Check> {
        std::mem::take(&mut self.checks)
    }

    /// The sequence number the next recorded step gets: every step numbered below it is
    /// in what a read submitted now sees.
    pub(crate) fn next_seq(&self) -> u64 {
        self.seq
    }

    /// The launches logged since the first check still unread or being resolved.
    pub(crate) fn log(&self) -> &[(u64, Vec<u64>)] {
        &self.log
    }

    /// Drops the log once no check needs it (none unread, none being resolved).
    pub(crate) fn trim_log(&mut self) {
        if self.checks.is_empty() && self.resolving == 0 {
            self.log.clear();
        }
    }

    /// Drops what was recorded without submitting it (the device is being destroyed, or
    /// can no longer be used: see [`super::health`]).
    pub(crate) fn discard(&mut self) {
        self.pass = None;
        self.encoder = None;
        self.params.clear();
        self.launches = 0;
        self.checks.clear();
        self.log.clear();
    }

    /// Ends the recording: the arena's contents are queued to be written at the start of
    /// the submission (after every earlier submission, so reusing the arena is ordered),
    /// and the commands come back for submitting. `None` when nothing was recorded. The
    /// arena is empty afterwards either way.
    pub(crate) fn finish(&mut self, queue: &wgpu::Queue, arena: &wgpu::Buffer) -> Option<wgpu::CommandBuffer> {
        self.pass = None;
        self.launches = 0;
        let Some(encoder) = self.encoder.take() else {
            // Parameters staged for a launch that panicked before it was recorded: nobody's.
            self.params.clear();
            return None;
        };
        if !self.params.is_empty() {
            queue.write_buffer(arena, 0, &self.params);
        }
        self.params.clear();
        Some(encoder.finish())
    }

    /// Whether nothing is recorded, staged or pending (for the tests of a lost batch).
    #[cfg(test)]
    pub(crate) fn is_clear(&self) -> bool {
        let empty = self.params.is_empty() && self.checks.is_empty() && self.log.is_empty();
        empty && self.encoder.is_none() && self.pass.is_none() && self.launches == 0
    }
}
