//! The work recorded on a context and not yet submitted: one command encoder with one open
//! compute pass, the parameter arena's contents, and the index checks waiting for the next
//! host read (see [`super::context`]); it is recorded and submitted under a [`Recording`].

use std::num::NonZeroU64;
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

use super::context::{bytes_of_u32, lock, Buffer, Ctx, Kernel, ARENA_BYTES};
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

/// The batch's lock, held to record into it and submit it. wgpu's error handler panics
/// with it held when an error loses the batch's work (at a launch, the encoder's end or the
/// submission; the device is then unusable, see [`super::health`]): the batch is discarded
/// as that panic unwinds, so that nothing of it lingers (launches that never ran, checks
/// whose error slots would not be cleared again, the arena's parameters).
pub(crate) struct Recording<'a> {
    ctx: &'a Ctx,
    batch: MutexGuard<'a, Batch>,
}

impl Ctx {
    /// The batch, locked for recording (see [`Recording`]).
    pub(crate) fn recording(&self) -> Recording<'_> {
        Recording { ctx: self, batch: lock(&self.batch) }
    }
}

impl std::ops::Deref for Recording<'_> {
    type Target = Batch;

    fn deref(&self) -> &Batch {
        &self.batch
    }
}

impl std::ops::DerefMut for Recording<'_> {
    fn deref_mut(&mut self) -> &mut Batch {
        &mut self.batch
    }
}

impl Drop for Recording<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() && self.ctx.alive().is_err() {
            self.batch.discard();
        }
    }
}

/// See the module docs.
#[derive(Default)]
pub(crate) struct Batch {
    encoder: Option<wgpu::CommandEncoder>,
    pass: Option<wgpu::ComputePass<'static>>,
    /// The arena's contents for this submission.
    params: Vec<u8>,
    launches: u32,
    /// Launches recorded on this context so far.
    seq: u64,
    checks: Vec<Check>,
    /// Since the first unread check: each launch's bound buffers (reads, `u64::MAX`,
    /// writes).
    log: Vec<(u64, Vec<u64>)>,
    /// Host reads waiting for the checks they took: launches stay logged until those
    /// checks' failures are marked.
    pub(crate) resolving: u32,
}

impl Batch {
    fn encoder(&mut self, ctx: &Ctx) -> &mut wgpu::CommandEncoder {
        ctx.check_alive();
        self.pass = None; // ends the open pass, if any
        self.encoder
            .get_or_insert_with(|| ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default()))
    }

    fn pass(&mut self, ctx: &Ctx) -> &mut wgpu::ComputePass<'static> {
        if self.pass.is_none() {
            let pass = self.encoder(ctx).begin_compute_pass(&wgpu::ComputePassDescriptor::default()).forget_lifetime();
            self.pass = Some(pass);
        }
        self.pass.as_mut().expect("opened above")
    }

    /// Appends `bytes` (a multiple of four) to the arena at an offset aligned for a
    /// binding, submitting first when the arena is full; returns the offset.
    ///
    /// # Panics
    /// When `bytes` exceeds the whole arena (submitting would never make room for it).
    pub(crate) fn stage(&mut self, ctx: &Ctx, bytes: &[u8]) -> u64 {
        assert!(
            bytes.len() as u64 <= ARENA_BYTES,
            "gpu:{}: a kernel's parameters of {} bytes exceed the parameter arena ({ARENA_BYTES} bytes)",
            ctx.ordinal,
            bytes.len()
        );
        let at = (self.params.len() as u64).div_ceil(ctx.align) * ctx.align;
        if at + bytes.len() as u64 > ARENA_BYTES {
            // Submitting empties the arena (`finish`), so this recurses once.
            ctx.submit_locked(self);
            return self.stage(ctx, bytes);
        }
        self.params.resize(at as usize, 0);
        self.params.extend_from_slice(bytes);
        at
    }

    /// Records a copy (sizes and offsets multiples of four).
    pub(crate) fn copy(&mut self, ctx: &Ctx, src: &wgpu::Buffer, so: u64, dst: &wgpu::Buffer, d_o: u64, bytes: u64) {
        self.encoder(ctx).copy_buffer_to_buffer(src, so, dst, d_o, bytes);
    }

    /// Records a launch of `k`: its parameters into the arena, a bind group, a dispatch.
    ///
    /// With `errors`, the context's error slots are bound after `buffers`.
    pub(crate) fn launch(
        &mut self,
        ctx: &'static Ctx,
        k: &Kernel,
        params: &[u32],
        buffers: &[&Buffer],
        errors: bool,
        grid: [u32; 3],
    ) {
        ctx.check_alive();
        if self.launches >= MAX_LAUNCHES {
            ctx.submit_locked(self);
        }
        let mut words = bytes_of_u32(params);
        if words.is_empty() {
            words.resize(4, 0); // a binding holds at least one word
        }
        let at = self.stage(ctx, &words);
        let mut entries = Vec::with_capacity(buffers.len() + 1);
        entries.push(wgpu::BindGroupEntry {
            binding: 0,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: &ctx.arena,
                offset: at,
                size: NonZeroU64::new(words.len() as u64),
            }),
        });
        for (i, b) in buffers.iter().enumerate() {
            entries.push(wgpu::BindGroupEntry { binding: i as u32 + 1, resource: b.raw().as_entire_binding() });
        }
        if errors {
            entries.push(wgpu::BindGroupEntry {
                binding: buffers.len() as u32 + 1,
                resource: ctx.errors.as_entire_binding(),
            });
        }
        let group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &k.layout,
            entries: &entries,
        });
        ctx.counters.bind_groups.fetch_add(1, Ordering::Relaxed);
        let pass = self.pass(ctx);
        pass.set_pipeline(&k.pipeline);
        pass.set_bind_group(0, &group, &[]);
        pass.dispatch_workgroups(grid[0], grid[1], grid[2]);
        self.launches += 1;
        ctx.counters.dispatches.fetch_add(1, Ordering::Relaxed);
        let split =
            |w: bool| buffers.iter().enumerate().filter(move |(i, _)| (k.writes >> (i + 1)) & 1 == u64::from(w));
        let reads: Vec<u64> = split(false).map(|(_, b)| b.id).collect();
        let writes: Vec<u64> = split(true).map(|(_, b)| b.id).collect();
        self.note(ctx, reads, writes);
    }

    /// Records a copy between two pool buffers (logged like a launch).
    pub(crate) fn copy_buffers(&mut self, ctx: &Ctx, src: &Buffer, dst: &Buffer, bytes: u64) {
        self.copy(ctx, src.raw(), 0, dst.raw(), 0, bytes);
        self.note(ctx, vec![src.id], vec![dst.id]);
    }

    /// Which buffers a recorded step read and wrote: logged while a check is unread (a
    /// failure marks what was computed from the failed op), and compared at once with the
    /// marks of an earlier failure.
    fn note(&mut self, ctx: &Ctx, reads: Vec<u64>, writes: Vec<u64>) {
        let seq = self.seq;
        self.seq += 1;
        ctx.propagate_marks(&reads, &writes);
        if !self.checks.is_empty() || self.resolving > 0 {
            let mut ids = reads;
            ids.push(u64::MAX);
            ids.extend(writes);
            self.log.push((seq, ids));
        }
    }

    /// Adds a check whose kernel is the next launch; returns its error slot. The slots
    /// are zeroed in order before the first check after a host read.
    pub(crate) fn add_check(&mut self, ctx: &Ctx, mut check: Check) -> u32 {
        if self.checks.is_empty() {
            self.encoder(ctx).clear_buffer(&ctx.errors, 0, None);
        }
        check.launch = self.seq;
        check.thread = std::thread::current().id();
        self.checks.push(check);
        (self.checks.len() - 1) as u32
    }

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
    pub(crate) fn finish(&mut self, ctx: &Ctx) -> Option<wgpu::CommandBuffer> {
        self.pass = None;
        self.launches = 0;
        let Some(encoder) = self.encoder.take() else {
            // Parameters staged for a launch that panicked before it was recorded: nobody's.
            self.params.clear();
            return None;
        };
        if !self.params.is_empty() {
            ctx.queue.write_buffer(&ctx.arena, 0, &self.params);
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
