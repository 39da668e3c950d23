//! Reading device buffers back: the one place the host waits for the device, and where
//! the index checks recorded since the last wait are read (see [`super::context`]); and
//! recording a check ([`Ctx::dispatch_checked`]), which waits when the error slots run out.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::batch::Check;
use super::context::{size_class, Buffer, Ctx, ERROR_SLOTS};
use super::lock;
use crate::backend::host::CpuStorage;

impl Ctx {
    /// [`dispatch`](Ctx::dispatch) of an index check: the check takes an error slot (the
    /// kernel `atomicMax`es `u32::MAX - position` of the first bad index into it), whose
    /// number is appended to `params`, and the error slots are bound after `buffers`. The
    /// slot and the launch are recorded under one lock, so a host read on another thread
    /// cannot take the check before its kernel is recorded (it would read the slot before
    /// the kernel ran, and the failure would go unreported).
    pub(crate) fn dispatch_checked(
        &'static self,
        src: &str,
        check: Check,
        mut params: Vec<u32>,
        buffers: &[&Buffer],
        groups: u64,
    ) {
        if groups == 0 {
            return;
        }
        let grid = self.grid(groups);
        let kernel = self.kernel(src);
        let mut b = self.recording();
        while b.checks_len() as u64 >= ERROR_SLOTS {
            // Out of slots: read them now (a host wait, only after 1024 unread checks).
            drop(b);
            let probe = self.alloc(4);
            drop(self.download(&probe, 4));
            b = self.recording();
        }
        params.push(b.add_check(self, check));
        b.launch(self, &kernel, &params, buffers, true, grid);
    }

    /// The first `len` bytes of `buf`, copied to the host: submits the batch and waits for
    /// it (a host wait). Index checks recorded since the last wait are read here too, and
    /// a failed one panics (see the module docs); so does reading a buffer marked by one.
    pub(crate) fn download(&'static self, buf: &Buffer, len: usize) -> Vec<u8> {
        self.check_alive();
        self.deliver_report();
        if let Some(why) = lock(&self.tainted).get(&buf.id) {
            panic!("{why}");
        }
        let (out, checks, slots) = self.read_back(buf, len, true);
        if !checks.is_empty() {
            self.failed_checks(&checks, &slots);
        }
        // Reads that took earlier checks may still be marking what failed: `buf` may be
        // among it, and its mark is only known once they are done.
        let mut b = lock(&self.batch);
        while b.resolving > 0 {
            b = self.resolved.wait(b).unwrap_or_else(|e| e.into_inner());
        }
        drop(b);
        self.deliver_report();
        if let Some(why) = lock(&self.tainted).get(&buf.id) {
            panic!("{why}");
        }
        out
    }

    /// [`download`](Ctx::download) without the index checks: it neither reads the pending
    /// checks (the next download does) nor refuses a marked buffer. Only for reporting a
    /// failed check (the index values it names, from a buffer a report may have marked).
    pub(crate) fn download_raw(&'static self, buf: &Buffer, len: usize) -> Vec<u8> {
        self.check_alive();
        self.read_back(buf, len, false).0
    }

    /// Panics with the report of a failed check filed for this thread, if there is one.
    fn deliver_report(&self) {
        if let Some(why) = lock(&self.reports).remove(&std::thread::current().id()) {
            panic!("{why}");
        }
    }

    /// Copies `len` bytes of `buf` and, with `checks`, the error slots of the pending index
    /// checks (which it takes once that is submitted, counting itself as resolving them:
    /// launches stay logged until their failures are marked) to a staging buffer, submits
    /// and waits.
    ///
    /// A failure from the submission on loses what the read waited for, the checks with it:
    /// the device is then unusable ([`super::health`]; a failed submission's batch is
    /// dropped, its checks among it).
    fn read_back(&'static self, buf: &Buffer, len: usize, checks: bool) -> (Vec<u8>, Vec<Check>, Vec<u32>) {
        let padded = (len as u64).div_ceil(4) * 4;
        let mut b = self.recording();
        let count = if checks { b.checks_len() } else { 0 };
        if padded == 0 && count == 0 {
            // Nothing to read: an empty tensor's values need no wait.
            return (Vec::new(), Vec::new(), Vec::new());
        }
        let check_bytes = 4 * count as u64;
        let size = size_class(padded + check_bytes);
        let staging = lock(&self.staging).get_mut(&size).and_then(Vec::pop).unwrap_or_else(|| {
            self.counters.allocations.fetch_add(1, Ordering::Relaxed);
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("nn download"),
                size,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        });
        if padded > 0 {
            b.copy(self, buf.raw(), 0, &staging, 0, padded);
        }
        if check_bytes > 0 {
            b.copy(self, &self.errors, 0, &staging, padded, check_bytes);
        }
        self.submit_locked(&mut b);
        // The `count` checks whose slots were copied (the lock was held since).
        let checks = if checks { b.take_checks() } else { Vec::new() };
        // Counted last under the lock (nothing between the count and its guard can panic,
        // and the guard, which takes the lock, is not dropped while it is held).
        if !checks.is_empty() {
            b.resolving += 1;
        }
        drop(b);
        let resolving = (!checks.is_empty()).then(|| Resolving(self));
        let (tx, rx) = std::sync::mpsc::channel();
        staging.slice(..padded + check_bytes).map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        self.counters.host_waits.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = self.device.poll(wgpu::PollType::wait_indefinitely()) {
            self.fail(format!("waiting for the device failed: {e}"));
        }
        if let Err(e) = rx.recv().expect("map_async calls back once polled") {
            self.fail(format!("reading a buffer back failed: {e}"));
        }
        let (out, slots) = {
            let view = staging
                .slice(..padded + check_bytes)
                .get_mapped_range()
                .unwrap_or_else(|e| self.fail(format!("reading a mapped buffer failed: {e}")));
            let slots: Vec<u32> = view[padded as usize..]
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
                .collect();
            (view[..len].to_vec(), slots)
        };
        staging.unmap();
        lock(&self.staging).entry(size).or_default().push(staging);
        // `failed_checks` ends the resolving (the guard only covers a panic before it).
        std::mem::forget(resolving);
        (out, checks, slots)
    }

    /// After `checks` were read (`slots`, their error words): marks what each failed check's
    /// op wrote, and what was computed from that since its launch, with its own report (a
    /// buffer that several reach keeps the earliest one's, as one marked before keeps its
    /// mark), and files a report for each thread that recorded one (its first failure).
    /// Ends this read's resolving of them.
    ///
    /// The reports are written first, reading the failing index values without the
    /// checks' bookkeeping ([`download_raw`](Ctx::download_raw)), so nothing here panics
    /// before every failure is marked. The marks are then made under the batch lock,
    /// from the log of every launch since the checks (including launches other threads
    /// recorded during the wait), so no launch falls between the log and the marks.
    fn failed_checks(&'static self, checks: &[Check], slots: &[u32]) {
        // Ends the resolving whatever happens below (a report's read may panic).
        let _resolving = Resolving(self);
        // In launch order: the checks' order.
        let failed: Vec<(&Check, u32)> =
            checks.iter().zip(slots).filter(|(_, &s)| s != 0).map(|(c, &s)| (c, u32::MAX - s)).collect();
        if failed.is_empty() {
            return;
        }
        // Each failure with the index value at the failing position as it reads now, and
        // the number of the first step that read does not see (one read per index buffer).
        let mut indices: HashMap<u64, (CpuStorage, u64)> = HashMap::new();
        let mut values: Vec<(&Check, u32, i64, u64)> = Vec::with_capacity(failed.len());
        for &(check, first) in &failed {
            let (index, unseen) = indices.entry(check.index.buf.id).or_insert_with(|| {
                let unseen = lock(&self.batch).next_seq();
                (check.index.to_cpu_raw(), unseen)
            });
            values.push((check, first, check.value_at(index, first as usize), *unseen));
        }
        let b = lock(&self.batch);
        // An index tensor written in place after its check (a logged launch writing its
        // buffer) no longer holds the value that failed: the report says so rather than
        // naming the value it holds now as the bad one.
        let written_since = |c: &Check, unseen: u64| {
            b.log().iter().any(|(launch, ids)| {
                (c.launch + 1..unseen).contains(launch) && split_log(ids).1.contains(&c.index.buf.id)
            })
        };
        let mut reports: Vec<(&Check, Arc<str>)> = Vec::with_capacity(values.len());
        for (check, first, bad, unseen) in values {
            let (op, dim, size, gpu) = (&check.op, check.dim, check.size, self.ordinal);
            let what = if written_since(check, unseen) {
                format!(
                    "{op}: the index at position {first} was out of bounds for dimension {dim} with size {size} (the \
                     index tensor was written in place after the check; it holds {bad} there now)"
                )
            } else {
                format!("{op}: index {bad} is out of bounds for dimension {dim} with size {size}")
            };
            let report = format!(
                "{what} (gpu:{gpu}: checked on the device and reported at the next host read; the values computed \
                 from it are not readable)"
            );
            reports.push((check, report.into()));
        }
        let mut t = lock(&self.tainted);
        for (check, report) in &reports {
            // From the check's own launch on: what ran before it did not read its op's output.
            let mut marked: HashSet<u64> = check.writes.iter().copied().collect();
            for (launch, (reads, writes)) in b.log().iter().map(|(l, ids)| (l, split_log(ids))) {
                if *launch > check.launch && reads.iter().any(|r| marked.contains(r)) {
                    marked.extend(writes);
                }
            }
            for id in marked {
                t.entry(id).or_insert_with(|| report.clone());
            }
        }
        drop(t);
        let mut r = lock(&self.reports);
        for (check, report) in reports {
            r.entry(check.thread).or_insert(report);
        }
        drop(r);
        drop(b);
    }
}

/// One host read resolving the checks it took: when dropped (also by a panic), the count
/// drops, the log is trimmed once no check needs it, and reads waiting for the marks are
/// woken.
struct Resolving(&'static Ctx);

impl Drop for Resolving {
    fn drop(&mut self) {
        let mut b = lock(&self.0.batch);
        b.resolving -= 1;
        b.trim_log();
        drop(b);
        self.0.resolved.notify_all();
    }
}

/// Binding ids of one logged launch: reads first, then `u64::MAX`, then writes.
fn split_log(ids: &[u64]) -> (&[u64], &[u64]) {
    let cut = ids.iter().position(|&i| i == u64::MAX).unwrap_or(ids.len());
    (&ids[..cut], ids.get(cut + 1..).unwrap_or(&[]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_log_separates_reads_and_writes() {
        assert_eq!(split_log(&[1, 2, u64::MAX, 3]), (&[1u64, 2][..], &[3u64][..]));
        assert_eq!(split_log(&[1]), (&[1u64][..], &[][..]));
    }
}
