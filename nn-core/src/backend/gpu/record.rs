//! Recording work into a context's batch ([`super::batch`]): the lock held while recording
//! ([`Recording`]), launches, copies and writes in order with them, and index checks. Every
//! kernel launch of the GPU backend goes through here.

use std::num::NonZeroU64;
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

use super::batch::{Batch, Check, MAX_LAUNCHES};
use super::context::{bytes_of_u32, Buffer, Ctx, Kernel, ARENA_BYTES, WORKGROUP};
use super::lock;

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
}

impl Ctx {
    /// A buffer holding `bytes` (padded to a multiple of four), written in order with the
    /// recorded kernels.
    pub(crate) fn upload(&'static self, bytes: &[u8]) -> Buffer {
        let buf = self.alloc(bytes.len() as u64);
        self.write(&buf, bytes);
        buf
    }

    /// Writes `bytes` (padded to a multiple of four) at the start of `buf`, after every
    /// kernel recorded so far: small writes go through the parameter arena and a recorded
    /// copy; large ones submit the batch and use the queue's write.
    pub(crate) fn write(&'static self, buf: &Buffer, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.check_alive();
        let padded = pad4(bytes);
        let mut b = self.recording();
        if (padded.len() as u64) <= ARENA_BYTES / 16 {
            let at = b.stage(self, &padded);
            b.copy(self, &self.arena, at, buf.raw(), 0, padded.len() as u64);
            return;
        }
        self.submit_locked(&mut b);
        drop(b);
        self.queue.write_buffer(buf.raw(), 0, &padded);
    }

    /// Copies `bytes` bytes from the start of `src` to the start of `dst`, in order with
    /// the recorded kernels.
    pub(crate) fn copy(&'static self, src: &Buffer, dst: &Buffer, bytes: u64) {
        if bytes > 0 {
            self.recording().copy_buffers(self, src, dst, bytes);
        }
    }

    /// Runs `src` over `groups` workgroups (spread over x and y when there are more than
    /// 65535), with binding 0 a read-only `array<u32>` holding `params` and bindings 1.. the
    /// `buffers` in order. Returns at once: the launch is recorded, and runs when the batch
    /// is submitted.
    pub(crate) fn dispatch(&'static self, src: &str, params: &[u32], buffers: &[&Buffer], groups: u64) {
        if groups == 0 {
            return;
        }
        self.dispatch3(src, params, buffers, self.grid(groups));
    }

    /// The grid of `groups` workgroups of a one-dimensional kernel: up to 65535 along x,
    /// then rows of them along y. Its kernels number their threads with the prelude's
    /// `flat()`, `id.x + id.y * nw.x * 256` in 32 bits.
    ///
    /// # Panics
    /// When the grid has more than 2^32 threads (`flat()` would wrap, and the last threads
    /// redo the first ones' elements) or more rows than the adapter allows; the message
    /// names the device and the size.
    pub(crate) fn grid(&self, groups: u64) -> [u32; 3] {
        let (x, y) = (groups.min(65535), groups.div_ceil(65535));
        let threads = x * y * u64::from(WORKGROUP);
        assert!(
            threads <= 1 << 32 && y <= u64::from(self.max_groups),
            "gpu:{} (`{}`): an op over {groups} workgroups of {WORKGROUP} threads needs a grid of {x} x {y} \
             ({threads} threads); kernels number their threads in 32 bits (2^32 at most) and the adapter allows {} \
             workgroups per dimension",
            self.ordinal,
            self.info.name,
            self.max_groups
        );
        [x as u32, y as u32, 1]
    }

    /// [`dispatch`](Ctx::dispatch) over an explicit grid of workgroups.
    pub(crate) fn dispatch3(&'static self, src: &str, params: &[u32], buffers: &[&Buffer], grid: [u32; 3]) {
        if grid.contains(&0) {
            return;
        }
        let kernel = self.kernel(src);
        self.launch3(&kernel, params, buffers, grid);
    }

    /// [`dispatch3`](Ctx::dispatch3) of a kernel compiled before.
    pub(crate) fn launch3(&'static self, kernel: &Kernel, params: &[u32], buffers: &[&Buffer], grid: [u32; 3]) {
        if grid.contains(&0) {
            return;
        }
        self.recording().launch(self, kernel, params, buffers, false, grid);
    }
}

/// `bytes` padded with zeros to a multiple of four.
fn pad4(bytes: &[u8]) -> Vec<u8> {
    let mut v = bytes.to_vec();
    v.resize(bytes.len().div_ceil(4) * 4, 0);
    v
}
