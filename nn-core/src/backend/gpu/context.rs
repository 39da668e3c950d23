//! One opened GPU adapter: its wgpu device and queue, the compiled pipelines, the caching
//! buffer allocator and the counters [`crate::gpu::stats`] reports.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Threads per workgroup of every one-dimensional kernel.
pub(crate) const WORKGROUP: u32 = 256;

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
    pipelines: Mutex<HashMap<String, Arc<wgpu::ComputePipeline>>>,
    pool: Mutex<HashMap<u64, Vec<wgpu::Buffer>>>,
    pub(crate) allocations: AtomicU64,
    pub(crate) reuses: AtomicU64,
    pub(crate) dispatches: AtomicU64,
    pub(crate) fallbacks: Mutex<BTreeMap<String, u64>>,
    /// The GEMM's adapter features, compiled kernels and tuning table.
    pub(crate) gemm: super::gemm_tune::GemmState,
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
    let gemm = super::gemm::Caps::new(ordinal, &info, device.features(), &adapter.cooperative_matrix_properties());
    Ok(Ctx {
        ordinal,
        device,
        queue,
        info,
        f64,
        max_binding: limits.max_storage_buffer_binding_size.min(limits.max_buffer_size),
        pipelines: Mutex::default(),
        pool: Mutex::default(),
        allocations: AtomicU64::new(0),
        reuses: AtomicU64::new(0),
        dispatches: AtomicU64::new(0),
        fallbacks: Mutex::default(),
        gemm: super::gemm_tune::GemmState::new(gemm),
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
            self.ctx.pool.lock().unwrap_or_else(|e| e.into_inner()).entry(self.class).or_default().push(raw);
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
    pub(crate) fn alloc(&'static self, bytes: u64) -> Buffer {
        let class = size_class(bytes);
        assert!(
            class <= self.max_binding,
            "gpu:{}: a buffer of {bytes} bytes exceeds this adapter's largest storage binding ({} bytes)",
            self.ordinal,
            self.max_binding
        );
        if let Some(raw) = self.pool.lock().unwrap_or_else(|e| e.into_inner()).get_mut(&class).and_then(Vec::pop) {
            self.reuses.fetch_add(1, Ordering::Relaxed);
            return Buffer { raw: Some(raw), class, ctx: self };
        }
        let raw = match self.try_create(class) {
            Some(raw) => raw,
            None => {
                // Out of memory: give the cached buffers back to the driver and retry once.
                self.pool.lock().unwrap_or_else(|e| e.into_inner()).clear();
                self.try_create(class).unwrap_or_else(|| {
                    panic!("gpu:{}: out of memory allocating a buffer of {bytes} bytes", self.ordinal)
                })
            }
        };
        self.allocations.fetch_add(1, Ordering::Relaxed);
        Buffer { raw: Some(raw), class, ctx: self }
    }

    fn try_create(&self, size: u64) -> Option<wgpu::Buffer> {
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let raw = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size,
            usage: USAGE,
            mapped_at_creation: false,
        });
        match pollster::block_on(scope.pop()) {
            None => Some(raw),
            Some(_) => None,
        }
    }

    /// A buffer holding `bytes` (padded to a multiple of four).
    pub(crate) fn upload(&'static self, bytes: &[u8]) -> Buffer {
        let buf = self.alloc(bytes.len() as u64);
        let whole = bytes.len() / 4 * 4;
        if whole > 0 {
            self.queue.write_buffer(buf.raw(), 0, &bytes[..whole]);
        }
        if whole < bytes.len() {
            let mut tail = [0u8; 4];
            tail[..bytes.len() - whole].copy_from_slice(&bytes[whole..]);
            self.queue.write_buffer(buf.raw(), whole as u64, &tail);
        }
        buf
    }

    /// The first `len` bytes of `buf`, copied to the host (waits for every kernel queued
    /// before).
    pub(crate) fn download(&'static self, buf: &Buffer, len: usize) -> Vec<u8> {
        if len == 0 {
            return Vec::new();
        }
        let padded = (len as u64).div_ceil(4) * 4;
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("nn download"),
            size: padded,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut enc = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
        enc.copy_buffer_to_buffer(buf.raw(), 0, &staging, 0, padded);
        self.queue.submit([enc.finish()]);
        let (tx, rx) = std::sync::mpsc::channel();
        staging.slice(..).map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .unwrap_or_else(|e| panic!("gpu:{}: waiting for the device failed: {e}", self.ordinal));
        rx.recv()
            .expect("map_async calls back once polled")
            .unwrap_or_else(|e| panic!("gpu:{}: reading a buffer back failed: {e}", self.ordinal));
        let out = staging
            .slice(..)
            .get_mapped_range()
            .unwrap_or_else(|e| panic!("gpu:{}: reading a mapped buffer failed: {e}", self.ordinal))[..len]
            .to_vec();
        staging.unmap();
        out
    }

    /// The compiled pipeline of a WGSL source (entry point `main`), compiled once.
    fn pipeline(&self, src: &str) -> Arc<wgpu::ComputePipeline> {
        if let Some(p) = self.pipelines.lock().unwrap_or_else(|e| e.into_inner()).get(src) {
            return p.clone();
        }
        let module = self.device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: None,
            source: wgpu::ShaderSource::Wgsl(src.into()),
        });
        let p = Arc::new(self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: None,
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        }));
        self.pipelines.lock().unwrap_or_else(|e| e.into_inner()).insert(src.to_string(), p.clone());
        p
    }

    /// Runs `src` over `groups` workgroups (spread over x and y when there are more than
    /// 65535), with binding 0 a read-only `array<u32>` holding `params` and bindings 1.. the
    /// `buffers` in order. Returns at once: the host waits only when it reads a buffer.
    pub(crate) fn dispatch(&'static self, src: &str, params: &[u32], buffers: &[&Buffer], groups: u64) {
        if groups == 0 {
            return;
        }
        let x = groups.min(65535) as u32;
        let y = u32::try_from(groups.div_ceil(65535)).expect("at most 2^32 workgroups");
        self.dispatch3(src, params, buffers, [x, y, 1]);
    }

    /// [`dispatch`](Ctx::dispatch) over an explicit grid of workgroups.
    pub(crate) fn dispatch3(&'static self, src: &str, params: &[u32], buffers: &[&Buffer], [x, y, z]: [u32; 3]) {
        if x == 0 || y == 0 || z == 0 {
            return;
        }
        let pipeline = self.pipeline(src);
        let p = self.upload(bytes_of_u32(params).as_slice());
        let mut entries = vec![wgpu::BindGroupEntry { binding: 0, resource: p.raw().as_entire_binding() }];
        for (i, b) in buffers.iter().enumerate() {
            entries.push(wgpu::BindGroupEntry { binding: i as u32 + 1, resource: b.raw().as_entire_binding() });
        }
        let group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        });
        let mut enc = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &group, &[]);
            pass.dispatch_workgroups(x, y, z);
        }
        self.queue.submit([enc.finish()]);
        self.dispatches.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one host round trip of the kernel `name` (an interface method without a
    /// native kernel for its operands yet).
    pub(crate) fn note_fallback(&self, name: &str) {
        *self.fallbacks.lock().unwrap_or_else(|e| e.into_inner()).entry(name.to_string()).or_default() += 1;
    }
}

/// `v` as little-endian bytes.
pub(crate) fn bytes_of_u32(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_le_bytes()).collect()
}
