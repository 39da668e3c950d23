//! One opened GPU adapter: its wgpu device and queue, the compiled pipelines, the caching
//! buffer allocator, the batch of recorded work and the counters [`crate::gpu::stats`]
//! reports.
//!
//! # Recording, not submitting
//! Kernels are recorded into one command encoder (one compute pass) per context and
//! submitted together ([`super::batch`], [`super::record`]): when the host needs a value (a download), before a large
//! host write, or when the batch fills ([`super::batch::MAX_LAUNCHES`] launches, or its parameter
//! arena). Kernel parameters and small uploads (a kernel's scalars) go into that arena, one
//! device buffer per context written once per submission, so a launch allocates nothing
//! and a warm training step makes no device allocation and waits for nothing until the
//! loss is read.
//!
//! # Index checks on the device
//! Index ops validate their indices in a kernel that records the first bad position in an
//! error slot ([`Ctx::error_slot`]); the slots are read at the next host wait, where a bad
//! index panics naming the op and the value (PyTorch CUDA's deferred device-side assert).
//! The buffers the failed op wrote, and everything computed from them before the report,
//! are marked: reading one later panics with that op's message, so a result built on a bad
//! index is never read as right.
//!
//! # Errors that lose work
//! A device lost, or an error wgpu reports outside an error scope (which loses the batch it
//! came with), makes the device unusable for good: see [`super::health`].

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, TryLockError};

use super::batch::Batch;
use super::gemm_caps::Caps;
use super::health::Sticky;
use super::lock;

/// Threads per workgroup of every one-dimensional kernel.
pub(crate) const WORKGROUP: u32 = 256;

/// Bytes of the parameter arena: parameters and small uploads of one submission.
pub(crate) const ARENA_BYTES: u64 = 1 << 20;

/// Error slots between two host waits (a wait is forced when they run out).
pub(crate) const ERROR_SLOTS: u64 = 1024;

/// The counters behind [`crate::gpu::GpuStats`].
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) allocations: AtomicU64,
    pub(crate) reuses: AtomicU64,
    pub(crate) dispatches: AtomicU64,
    pub(crate) submissions: AtomicU64,
    pub(crate) host_waits: AtomicU64,
    pub(crate) bind_groups: AtomicU64,
}

/// A compiled kernel: its pipeline and which bindings it writes (read off the WGSL
/// declarations `var<storage, read_write>`), for marking what a failed index op wrote.
pub(crate) struct Kernel {
    pub(crate) pipeline: wgpu::ComputePipeline,
    pub(crate) layout: wgpu::BindGroupLayout,
    pub(crate) writes: u64,
}

/// An opened adapter. Contexts live for the whole process (`&'static`): buffers hand
/// themselves back to their context's pool when dropped, whatever thread drops them.
pub(crate) struct Ctx {
    /// `n` in `gpu:n`.
    pub(crate) ordinal: usize,
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) info: wgpu::AdapterInfo,
    /// Whether shaders may use `f64` (the adapter offers `SHADER_F64`).
    pub(crate) f64: bool,
    /// The largest storage buffer one binding may see, in bytes.
    pub(crate) max_binding: u64,
    /// Alignment of a storage binding's offset (parameters in the arena).
    pub(crate) align: u64,
    pipelines: Mutex<HashMap<String, Arc<Kernel>>>,
    pool: Mutex<HashMap<u64, Vec<wgpu::Buffer>>>,
    pub(crate) staging: Mutex<HashMap<u64, Vec<wgpu::Buffer>>>,
    pub(crate) batch: Mutex<Batch>,
    /// Signalled (with `batch`'s lock) when a host read finishes resolving its checks
    /// (`Batch::resolving` drops).
    pub(crate) resolved: std::sync::Condvar,
    /// Parameters and small uploads of the batch being recorded.
    pub(crate) arena: wgpu::Buffer,
    /// The error slots of index checks (zeroed when the first check after a wait is
    /// recorded).
    pub(crate) errors: wgpu::Buffer,
    /// Buffers written by a failed index op, or computed from one, with the report.
    pub(crate) tainted: Mutex<HashMap<u64, Arc<str>>>,
    /// Reports of failed checks read by another thread, for the thread that recorded
    /// them (delivered at its next host read).
    pub(crate) reports: Mutex<HashMap<std::thread::ThreadId, Arc<str>>>,
    /// Why the device was lost, once it is.
    pub(super) lost: Sticky,
    /// The first error wgpu reported outside an error scope, or that lost a read's work.
    pub(super) failed: Sticky,
    /// The most workgroups a grid may have along one dimension.
    pub(crate) max_groups: u32,
    next_id: AtomicU64,
    pub(crate) counters: Counters,
    pub(crate) fallbacks: Mutex<BTreeMap<String, u64>>,
    /// What the adapter offers the GEMM (its compiled kernels and tuning table are the
    /// GEMM's own: [`super::gemm_tune::state`]).
    pub(crate) gemm_caps: Caps,
}

/// The adapters wgpu found, best first (discrete GPUs, then integrated, virtual, software),
/// each opened on first use.
struct Adapters {
    list: Vec<wgpu::Adapter>,
    opened: Vec<OnceLock<Result<&'static Ctx, String>>>,
}

fn adapters() -> &'static Adapters {
    static ADAPTERS: OnceLock<Adapters> = OnceLock::new();
    ADAPTERS.get_or_init(|| {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let mut list = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
        let rank = |a: &wgpu::Adapter| match a.get_info().device_type {
            wgpu::DeviceType::DiscreteGpu => 0,
            wgpu::DeviceType::IntegratedGpu => 1,
            wgpu::DeviceType::VirtualGpu => 2,
            wgpu::DeviceType::Cpu => 3,
            wgpu::DeviceType::Other => 4,
        };
        list.sort_by_key(rank);
        let opened = list.iter().map(|_| OnceLock::new()).collect();
        Adapters { list, opened }
    })
}

/// How many adapters there are.
pub(crate) fn count() -> usize {
    adapters().list.len()
}

/// The context of `gpu:n`, opening the adapter on first use; the error says why it
/// cannot be used.
pub(crate) fn get(n: usize) -> Result<&'static Ctx, String> {
    let a = adapters();
    let Some(adapter) = a.list.get(n) else {
        return Err(match a.list.len() {
            0 => "wgpu found no GPU adapter (Vulkan, Metal or DX12); on Linux without a GPU, \
                  install Mesa's software Vulkan: `apt-get install mesa-vulkan-drivers`"
                .to_string(),
            k => format!("there are {k} GPU adapter(s), gpu:0 to gpu:{}", k - 1),
        });
    };
    a.opened[n].get_or_init(|| open(n, adapter).map(|c| &*Box::leak(Box::new(c)))).clone()
}

fn open(ordinal: usize, adapter: &wgpu::Adapter) -> Result<Ctx, String> {
    let info = adapter.get_info();
    let f64 = adapter.features().contains(wgpu::Features::SHADER_F64);
    let limits = adapter.limits();
    let base = if f64 { wgpu::Features::SHADER_F64 } else { wgpu::Features::empty() };
    // What the GEMM variants use where the adapter has it (see `gemm`).
    let gemm = adapter.features()
        & (wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP | wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX);
    let desc = |features: wgpu::Features| wgpu::DeviceDescriptor {
        label: Some("nn"),
        required_features: features,
        required_limits: limits.clone(),
        experimental_features: if features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
            // SAFETY: the only experimental feature requested is cooperative matrices, which
            // only the `coop64x64_f16` GEMM uses, on shapes and types the adapter lists.
            unsafe { wgpu::ExperimentalFeatures::enabled() }
        } else {
            wgpu::ExperimentalFeatures::disabled()
        },
        ..Default::default()
    };
    // Without the GEMM's extras when the adapter offers them but will not open with them.
    let (device, queue) = pollster::block_on(adapter.request_device(&desc(base | gemm)))
        .or_else(|_| pollster::block_on(adapter.request_device(&desc(base))))
        .map_err(|e| format!("opening adapter `{}` ({:?}) failed: {e}", info.name, info.backend))?;
    let (lost, failed) = super::health::watch(&device, ordinal, &info.name);
    let buffer = |label, size, usage| {
        device.create_buffer(&wgpu::BufferDescriptor { label: Some(label), size, usage, mapped_at_creation: false })
    };
    let arena = buffer(
        "nn parameters",
        ARENA_BYTES,
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
    );
    let errors = buffer("nn index checks", 4 * ERROR_SLOTS, USAGE);
    let gemm_caps = Caps::new(ordinal, &info, device.features(), &adapter.cooperative_matrix_properties());
    Ok(Ctx {
        ordinal,
        device,
        queue,
        info,
        f64,
        max_binding: limits.max_storage_buffer_binding_size.min(limits.max_buffer_size),
        align: u64::from(limits.min_storage_buffer_offset_alignment).max(wgpu::COPY_BUFFER_ALIGNMENT),
        pipelines: Mutex::default(),
        pool: Mutex::default(),
        staging: Mutex::default(),
        batch: Mutex::default(),
        resolved: std::sync::Condvar::new(),
        arena,
        errors,
        tainted: Mutex::default(),
        reports: Mutex::default(),
        lost,
        failed,
        max_groups: limits.max_compute_workgroups_per_dimension,
        next_id: AtomicU64::new(0),
        counters: Counters::default(),
        fallbacks: Mutex::default(),
        gemm_caps,
    })
}

/// The allocation size for `bytes`: at least 256, then four classes per power of two
/// (a request is rounded up by at most 25%, and buffers of one class are interchangeable).
pub(crate) fn size_class(bytes: u64) -> u64 {
    let b = bytes.max(256);
    let p = 63 - b.leading_zeros(); // 2^p <= b
    let quarter = 1u64 << (p - 2);
    b.div_ceil(quarter) * quarter
}

/// A device buffer from the pool; it returns there when dropped.
pub(crate) struct Buffer {
    raw: Option<wgpu::Buffer>,
    class: u64,
    /// Unique per context for the buffer's lifetime in the pool (index-check marks).
    pub(crate) id: u64,
    pub(crate) ctx: &'static Ctx,
}

impl Buffer {
    pub(crate) fn raw(&self) -> &wgpu::Buffer {
        self.raw.as_ref().expect("present until dropped")
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if let Some(raw) = self.raw.take() {
            // A buffer marked by a failed index check is not reused: the mark stays with
            // its values, and a fresh tensor never inherits it.
            if lock(&self.ctx.tainted).remove(&self.id).is_some() {
                return;
            }
            lock(&self.ctx.pool).entry(self.class).or_default().push(raw);
        }
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "gpu:{} buffer of {} bytes", self.ctx.ordinal, self.class)
    }
}

const USAGE: wgpu::BufferUsages =
    wgpu::BufferUsages::STORAGE.union(wgpu::BufferUsages::COPY_SRC).union(wgpu::BufferUsages::COPY_DST);

impl Ctx {
    /// A buffer of at least `bytes` bytes (contents unspecified), reused from the pool
    /// when one of its size class is free.
    ///
    /// # Panics
    /// When the device is out of memory even after the pool was emptied, or `bytes`
    /// exceeds what one binding can address; the message names the device and the size.
    /// When the device cannot be used (see [`super::health`]), also for a pooled buffer.
    pub(crate) fn alloc(&'static self, bytes: u64) -> Buffer {
        self.check_alive();
        let class = size_class(bytes);
        assert!(
            class <= self.max_binding,
            "gpu:{}: a buffer of {bytes} bytes exceeds this adapter's largest storage binding ({} bytes)",
            self.ordinal,
            self.max_binding
        );
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if let Some(raw) = lock(&self.pool).get_mut(&class).and_then(Vec::pop) {
            self.counters.reuses.fetch_add(1, Ordering::Relaxed);
            return Buffer { raw: Some(raw), class, id, ctx: self };
        }
        let raw = match self.try_create(class) {
            Some(raw) => raw,
            None => {
                // Out of memory: give the cached buffers back to the driver and retry once.
                lock(&self.pool).clear();
                lock(&self.staging).clear();
                self.try_create(class).unwrap_or_else(|| {
                    panic!(
                        "gpu:{} (`{}`): out of memory allocating a buffer of {bytes} bytes",
                        self.ordinal, self.info.name
                    )
                })
            }
        };
        self.counters.allocations.fetch_add(1, Ordering::Relaxed);
        Buffer { raw: Some(raw), class, id, ctx: self }
    }

    /// A new buffer, or `None` when the device is out of memory (the error scope's result
    /// is read without a host wait: see [`ready`](Ctx::ready)).
    fn try_create(&self, size: u64) -> Option<wgpu::Buffer> {
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let raw = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size,
            usage: USAGE,
            mapped_at_creation: false,
        });
        let error = self.ready(scope.pop());
        error.is_none().then_some(raw)
    }

    /// Submits the recorded batch (nothing when it is empty).
    pub(crate) fn submit_locked(&self, b: &mut Batch) {
        if let Some(cmd) = b.finish(&self.queue, &self.arena) {
            self.queue.submit([cmd]);
            self.counters.submissions.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The compiled kernel of a WGSL source (entry point `main`), compiled once.
    ///
    /// # Panics
    /// When the adapter rejects the source (a backend bug, or a feature the adapter
    /// lacks): the message names the device and the compiler's error.
    pub(crate) fn kernel(&self, src: &str) -> Arc<Kernel> {
        self.try_kernel(src).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`kernel`](Ctx::kernel), or the compiler's error naming the device (for callers
    /// with a fallback, such as GEMM variants an adapter may not compile).
    pub(crate) fn try_kernel(&self, src: &str) -> Result<Arc<Kernel>, String> {
        if let Some(k) = lock(&self.pipelines).get(src) {
            return Ok(k.clone());
        }
        let k = self.build(src, wgpu::ShaderRuntimeChecks::checked())?;
        lock(&self.pipelines).insert(src.to_string(), k.clone());
        Ok(k)
    }

    /// Compiles `src` (entry point `main`) with the runtime checks `checks`, outside the
    /// pipeline cache, under validation and internal error scopes: `Err` carries the
    /// compiler's error (naga or the driver), naming the device.
    ///
    /// # Safety
    /// With checks off (anything but [`wgpu::ShaderRuntimeChecks::checked`]), every buffer
    /// and array access of `src` must be in bounds for every binding it will be
    /// dispatched with, every loop must terminate and no integer division may divide by
    /// zero: the compiled code no longer guards against these (see
    /// `wgpu::Device::create_shader_module_trusted`).
    pub(crate) unsafe fn build_trusted(
        &self,
        src: &str,
        checks: wgpu::ShaderRuntimeChecks,
    ) -> Result<Arc<Kernel>, String> {
        self.build(src, checks)
    }

    fn build(&self, src: &str, checks: wgpu::ShaderRuntimeChecks) -> Result<Arc<Kernel>, String> {
        self.check_alive();
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let internal = self.device.push_error_scope(wgpu::ErrorFilter::Internal);
        let desc = wgpu::ShaderModuleDescriptor { label: None, source: wgpu::ShaderSource::Wgsl(src.into()) };
        // SAFETY: `checks` is `checked()` (then this is `create_shader_module`), or comes
        // from `build_trusted`, whose caller vouches for `src`.
        let module = unsafe { self.device.create_shader_module_trusted(desc, checks) };
        let pipeline = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: None,
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        let errors = [self.ready(internal.pop()), self.ready(validation.pop())];
        if let Some(e) = errors.into_iter().flatten().next() {
            let first = src.lines().find(|l| l.starts_with("//") || l.contains("fn main")).unwrap_or("");
            return Err(format!(
                "gpu:{} (`{}`): compiling a kernel failed ({first}): {e}",
                self.ordinal, self.info.name
            ));
        }
        let layout = pipeline.get_bind_group_layout(0);
        Ok(Arc::new(Kernel { pipeline, layout, writes: written_bindings(src) }))
    }

    /// The result of an error scope: wgpu reports errors synchronously on native
    /// backends, so it is ready at once; where it is not, the host waits for it (counted).
    fn ready(&self, pending: impl std::future::Future<Output = Option<wgpu::Error>>) -> Option<wgpu::Error> {
        let mut pending = std::pin::pin!(pending);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match std::future::Future::poll(pending.as_mut(), &mut cx) {
            std::task::Poll::Ready(e) => e,
            std::task::Poll::Pending => {
                self.counters.host_waits.fetch_add(1, Ordering::Relaxed);
                pollster::block_on(pending)
            }
        }
    }

    /// After a failed check was reported: a step that reads a marked buffer marks what it
    /// writes.
    pub(crate) fn propagate_marks(&self, reads: &[u64], writes: &[u64]) {
        let mut t = lock(&self.tainted);
        if t.is_empty() {
            return;
        }
        if let Some(why) = reads.iter().find_map(|r| t.get(r).cloned()) {
            for &w in writes {
                t.insert(w, why.clone());
            }
        }
    }

    /// Counts one host round trip of the kernel `name` (an interface method without a
    /// native kernel for its operands yet).
    pub(crate) fn note_fallback(&self, name: &str) {
        *lock(&self.fallbacks).entry(name.to_string()).or_default() += 1;
    }
}

/// Whether the device can be used (see [`super::health`]).
impl Ctx {
    /// Panics naming the device when it cannot be used (see [`super::health`]). What the
    /// batch holds can never be submitted then: it is dropped first, unless a thread is
    /// recording into it (this one included), whose [`super::record::Recording`] drops it
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

/// The bindings a WGSL source declares `var<storage, read_write>`, as a bit mask.
pub(crate) fn written_bindings(src: &str) -> u64 {
    let mut mask = 0;
    for decl in src.split("@binding(").skip(1) {
        let Some((n, rest)) = decl.split_once(')') else { continue };
        let head = rest.split(';').next().unwrap_or("");
        if let (Ok(n), true) = (n.trim().parse::<u32>(), head.contains("read_write")) {
            if n < 64 {
                mask |= 1 << n;
            }
        }
    }
    mask
}

/// `v` as little-endian bytes.
pub(crate) fn bytes_of_u32(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_le_bytes()).collect()
}

#[cfg(test)]
#[path = "context_tests.rs"]
mod tests;
