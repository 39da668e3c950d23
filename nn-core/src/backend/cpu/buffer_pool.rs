//! A recycling pool for large floating-point buffers (`f32`, `f64`, and the half types,
//! which autocast makes as many of: a GPT-2 step casts its 38.6M-parameter tied
//! embedding to `bf16` every forward).
//!
//! Training allocates and frees the same large buffers every step (activations,
//! gradients). Fresh large allocations come from the OS as zeroed pages, one page fault
//! per 4 KiB touched, which would be over half of a 784-256-10 MLP step's time (the
//! `compare.py` rows `mlp_step_b64` and `mlp_step_b256` show the step). Freed
//! storage buffers of at least [`MIN_ELEMS`] elements are kept here (up to [`MAX_BYTES`]
//! in total) and handed back to the next op that needs a buffer of a similar size.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Buffers smaller than this many elements are left to the allocator.
pub(crate) const MIN_ELEMS: usize = 1 << 12;
/// The pool never holds more than this many bytes (unless [`set_limit`] says otherwise).
/// 2 GiB: a GPT-2 step (53.6M parameters) frees and takes back buffers of 77-154 MiB (the
/// tied embedding's gradient, its `bf16` cast, the logits), in `f32` and `bf16` at once
/// under autocast. Under 256 MiB they go back to the OS and come back as fresh pages; at
/// 1 GiB a bf16 autocast step still faults in more pages than the f32 step and is slower
/// than it; at 2 GiB it is faster (4 GiB: the same as 2; the `compare.py` rows
/// `amp_gpt2_step_bf16` and `gpt2_step` show both steps). The memory
/// is held only when a workload frees that much; `nn_core::storage::set_buffer_pool_limit`
/// lowers (or raises) the ceiling.
pub(crate) const MAX_BYTES: usize = 2 << 30;
/// At most this many buffers per type are kept.
const MAX_BUFFERS: usize = 256;

static BYTES: AtomicUsize = AtomicUsize::new(0);
/// The pool's current ceiling ([`MAX_BYTES`] unless [`set_limit`] changed it).
static LIMIT: AtomicUsize = AtomicUsize::new(MAX_BYTES);
static F32: Mutex<Vec<Vec<f32>>> = Mutex::new(Vec::new());
static F64: Mutex<Vec<Vec<f64>>> = Mutex::new(Vec::new());
static F16: Mutex<Vec<Vec<half::f16>>> = Mutex::new(Vec::new());
static BF16: Mutex<Vec<Vec<half::bf16>>> = Mutex::new(Vec::new());

/// Element types with a pool.
pub(crate) trait Pooled: Sized + 'static {
    fn list() -> &'static Mutex<Vec<Vec<Self>>>;
}
impl Pooled for f32 {
    fn list() -> &'static Mutex<Vec<Vec<f32>>> {
        &F32
    }
}
impl Pooled for f64 {
    fn list() -> &'static Mutex<Vec<Vec<f64>>> {
        &F64
    }
}
impl Pooled for half::f16 {
    fn list() -> &'static Mutex<Vec<Vec<half::f16>>> {
        &F16
    }
}
impl Pooled for half::bf16 {
    fn list() -> &'static Mutex<Vec<Vec<half::bf16>>> {
        &BF16
    }
}

/// An empty vector with capacity for at least `len` elements, recycled when possible (a
/// pooled buffer is used only if it is at most twice as large as needed).
///
/// # Panics
/// When the allocator cannot provide the buffer (instead of aborting the process).
#[track_caller]
pub(crate) fn take<T: Pooled>(len: usize) -> Vec<T> {
    try_take(len).unwrap_or_else(|| panic!("{}", alloc_failure::<T>(len)))
}

/// [`take`], or `None` when the allocator cannot provide the buffer.
pub(crate) fn try_take<T: Pooled>(len: usize) -> Option<Vec<T>> {
    if len >= MIN_ELEMS {
        let mut list = T::list().lock().unwrap_or_else(|e| e.into_inner());
        let best = list
            .iter()
            .enumerate()
            .filter(|(_, v)| v.capacity() >= len && v.capacity() <= 2 * len)
            .min_by_key(|(_, v)| v.capacity())
            .map(|(i, _)| i);
        if let Some(i) = best {
            let mut v = list.swap_remove(i);
            BYTES.fetch_sub(v.capacity() * std::mem::size_of::<T>(), Ordering::Relaxed);
            v.clear();
            return Some(v);
        }
    }
    try_with_capacity(len)
}

/// An empty vector with capacity for `len` elements, or `None` when the allocator cannot
/// provide it (a request past `isize::MAX` bytes, or more than the system will give).
pub(crate) fn try_with_capacity<T>(len: usize) -> Option<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).ok()?;
    Some(v)
}

/// The message for a buffer of `len` elements of `T` that could not be allocated.
pub(crate) fn alloc_failure<T>(len: usize) -> String {
    format!("cannot allocate a tensor buffer of {len} elements ({} bytes)", len as u128 * size_of::<T>() as u128)
}

/// A vector of `len` copies of `value`, recycled when possible.
#[track_caller]
pub(crate) fn filled<T: Pooled + Copy>(len: usize, value: T) -> Vec<T> {
    try_filled(len, value).unwrap_or_else(|| panic!("{}", alloc_failure::<T>(len)))
}

/// [`filled`], or `None` when the allocator cannot provide the buffer.
pub(crate) fn try_filled<T: Pooled + Copy>(len: usize, value: T) -> Option<Vec<T>> {
    let mut v = try_take(len)?;
    v.resize(len, value);
    Some(v)
}

/// Returns a buffer to the pool (or frees it when the pool is full or it is small).
pub(crate) fn give<T: Pooled>(v: Vec<T>) {
    let bytes = v.capacity() * std::mem::size_of::<T>();
    if v.capacity() < MIN_ELEMS || BYTES.load(Ordering::Relaxed) + bytes > LIMIT.load(Ordering::Relaxed) {
        return;
    }
    let mut list = T::list().lock().unwrap_or_else(|e| e.into_inner());
    if list.len() >= MAX_BUFFERS {
        return;
    }
    BYTES.fetch_add(bytes, Ordering::Relaxed);
    list.push(v);
}

/// Bytes the pool holds now (freed buffers kept for reuse).
pub(crate) fn bytes() -> usize {
    BYTES.load(Ordering::Relaxed)
}

/// Sets the pool's ceiling (`0` turns pooling off) and frees what it holds above it.
pub(crate) fn set_limit(limit: usize) {
    LIMIT.store(limit, Ordering::Relaxed);
    fn trim<T: Pooled>(limit: usize) {
        let mut list = T::list().lock().unwrap_or_else(|e| e.into_inner());
        while BYTES.load(Ordering::Relaxed) > limit {
            let Some(v) = list.pop() else { break };
            BYTES.fetch_sub(v.capacity() * std::mem::size_of::<T>(), Ordering::Relaxed);
        }
    }
    trim::<f32>(limit);
    trim::<f64>(limit);
    trim::<half::f16>(limit);
    trim::<half::bf16>(limit);
}

/// Returns a scratch buffer of any element type to the pool (through the storage drop,
/// which pools the floating-point types and frees the rest).
pub(crate) fn recycle<T: super::CpuElement>(v: Vec<T>) {
    drop(T::into_storage(v));
}

/// Largest block glibc's `malloc` serves from its heaps once [`keep_heap_pages`] has run
/// (larger ones are mapped and unmapped per call); 32 MiB is glibc's ceiling for it.
pub(crate) const HEAP_BLOCK_MAX: usize = 32 << 20;
/// Free memory at the top of a glibc heap that stays there instead of going back to the
/// OS, once [`keep_heap_pages`] has run (1 GiB; `mallopt` takes a C `int`, so it cannot
/// follow [`MAX_BYTES`] past 2 GiB).
pub(crate) const HEAP_TRIM_AT: usize = 1 << 30;
const _: () = assert!(HEAP_TRIM_AT <= i32::MAX as usize, "mallopt takes a C int");

/// Keeps the C heap's pages mapped between GEMM calls (glibc on Linux; elsewhere nothing).
///
/// The `gemm` crate allocates its packed operand (hundreds of KiB for the workloads'
/// products) with the global allocator on every call and frees it at the end, outside
/// this pool. glibc gives a freed block at the top of its heap back to the OS once the
/// free top passes its trim threshold, and its default thresholds move with the sizes
/// seen so far. Which thread's heap a block lands in depends on which thread ran the
/// task, so without these settings every call in some processes takes fresh zeroed pages
/// again (an MLP step at batch 256 on 2 threads faults in about 160 pages, in the gemm
/// crate's packing); with them, a warm step faults in none (`nn-core/tests/heap_pages.rs`
/// checks it).
///
/// Fixed thresholds (which also end glibc's moving ones): blocks up to
/// [`HEAP_BLOCK_MAX`] come from the heaps, and up to [`HEAP_TRIM_AT`] of free memory
/// stays mapped, as the pool keeps up to that much. Skipped when `GLIBC_TUNABLES` sets a
/// `glibc.malloc.` tunable: then the user chose the allocator's behaviour.
pub(crate) fn keep_heap_pages() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        if std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("glibc.malloc.")) {
            return;
        }
        // SAFETY: `mallopt` only sets the allocator's thresholds (it takes glibc's
        // allocator lock); both values are in its accepted ranges.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, HEAP_BLOCK_MAX as libc::c_int);
            libc::mallopt(libc::M_TRIM_THRESHOLD, HEAP_TRIM_AT as libc::c_int);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two tests that change or rely on the pool's limit run one at a time.
    static SERIAL: Mutex<()> = Mutex::new(());

    #[test]
    fn recycles_similar_sizes_only() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let v: Vec<f64> = Vec::with_capacity(1 << 13);
        let p = v.as_ptr();
        give(v);
        let w: Vec<f64> = take(1 << 13);
        assert_eq!(w.as_ptr(), p, "a freed buffer of the right size is reused");
        assert!(w.is_empty());
        give(w);
        let small: Vec<f64> = take(1 << 11);
        assert_ne!(small.as_ptr(), p, "a buffer more than twice too large is not handed out");
        let _ = take::<f64>(1 << 13);
    }

    #[test]
    fn a_lower_limit_frees_what_is_above_it() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        // Other tests share the pool: only what this one adds and removes is checked.
        give::<f32>(Vec::with_capacity(1 << 14));
        assert!(bytes() >= 4 << 14);
        set_limit(0);
        assert_eq!(bytes(), 0, "everything above the limit is freed");
        give::<f32>(Vec::with_capacity(1 << 14));
        assert_eq!(bytes(), 0, "nothing is kept under a limit of 0");
        set_limit(MAX_BYTES);
    }
}
