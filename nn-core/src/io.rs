//! Crash-safe file writes: write a temporary file in the destination's folder, flush it
//! to disk, then rename it over the destination. A crash or error at any point leaves
//! either the old file or the new one, never a mix.
//!
//! # Temporary files and crashed saves
//!
//! The temporary file for `dir/NAME` is `dir/.NAME.tmp-<pid>-<n>` (`pid`: the saving
//! process, `n`: a per-process counter). An error or a panic during the write removes it.
//! A process killed mid-save cannot, so every save first removes the leftovers of
//! crashed saves of the same target, by this rule:
//!
//! - a temporary file of a process that is no longer running is a leftover;
//! - a temporary file with this process's pid that this process is not writing now is a
//!   leftover (an earlier process had the same pid);
//! - a temporary file of a running process, or one this process is writing on another
//!   thread, is a save in progress and is left alone.
//!
//! Only files matching the target's own pattern are considered; other files in the
//! folder are never touched. A crashed saver's pid reused by an unrelated process keeps
//! its leftover until that process ends (the rule errs on the side of keeping files). On
//! a folder shared between machines (NFS), a pid says nothing about the other machine's
//! processes: a save from another machine that is in progress there can lose its
//! temporary file, and then fails with an error; the target itself is never damaged.
//! Liveness is known on Unix; elsewhere only this process's own leftovers are removed.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::error::{Error, Result};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// The temporary files this process is writing now (any thread).
static IN_FLIGHT: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);

fn in_flight() -> MutexGuard<'static, Option<HashSet<PathBuf>>> {
    IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner())
}

/// A temporary file being written: registered as in flight while it lives, removed on
/// drop unless it was renamed into place (so an error or a panic leaves nothing behind).
struct TempFile {
    path: PathBuf,
    committed: bool,
}

impl TempFile {
    fn create(path: PathBuf) -> io::Result<(TempFile, File)> {
        in_flight().get_or_insert_with(HashSet::new).insert(path.clone());
        let guard = TempFile { path, committed: false };
        let file = OpenOptions::new().write(true).create_new(true).open(&guard.path)?;
        Ok((guard, file))
    }

    fn commit(mut self, to: &Path) -> io::Result<()> {
        let replaced = open_replaced(to);
        std::fs::rename(&self.path, to)?;
        self.committed = true;
        if let Some(file) = replaced {
            release_in_background(file);
        }
        Ok(())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.path);
        }
        if let Some(set) = in_flight().as_mut() {
            set.remove(&self.path);
        }
    }
}

/// Writes `path` atomically: `write` fills a temporary file in the same folder, which is
/// then synced and renamed over `path` (and the folder synced, so the rename is durable).
/// If `write` or any step fails (or panics), the temporary file is removed and `path` is
/// untouched. Before writing, the leftovers of crashed saves of `path` are removed (see
/// the [module docs](self) for the rule that keeps concurrent saves safe).
///
/// ```
/// let dir = std::env::temp_dir().join(format!("nn-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let p = dir.join("x.bin");
/// nn_core::io::atomic_write(&p, |f| std::io::Write::write_all(f, b"new")).unwrap();
/// assert_eq!(std::fs::read(&p).unwrap(), b"new");
/// // A failing writer leaves the previous content in place.
/// let r = nn_core::io::atomic_write(&p, |f| {
///     std::io::Write::write_all(f, b"partial")?;
///     Err(std::io::Error::other("disk full"))
/// });
/// assert!(r.is_err());
/// assert_eq!(std::fs::read(&p).unwrap(), b"new");
/// // A crashed save's leftover (pid 0 is never a saver) is removed by the next save.
/// std::fs::write(dir.join(".x.bin.tmp-0-3"), b"partial").unwrap();
/// nn_core::io::atomic_write(&p, |f| std::io::Write::write_all(f, b"newer")).unwrap();
/// assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
///
/// # Errors
/// [`Error::Io`] naming the file, for a failure of `write` or of the file system.
pub fn atomic_write(path: impl AsRef<Path>, write: impl FnOnce(&mut File) -> io::Result<()>) -> Result<()> {
    let mut files = AtomicFiles::new();
    files.write(path, write)?;
    files.commit()
}

/// Several files written together, as [`atomic_write`] writes one: each is written in
/// full to its own temporary file (synced) by [`write`](AtomicFiles::write), and
/// [`commit`](AtomicFiles::commit) renames them all into place, one right after the
/// other, only once every one was written. A failed or panicking write, or dropping the
/// set uncommitted, removes the temporary files and leaves every target untouched. (For
/// files that must agree, as a model's weights and its config: written one by one, a
/// failure between them left a new file beside an old one.) Only a rename failing between
/// two others, after every file was written, can leave some targets new and some old.
///
/// ```
/// let dir = std::env::temp_dir().join(format!("nn-doc-files-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let mut files = nn_core::io::AtomicFiles::new();
/// files.write(dir.join("a.json"), |f| std::io::Write::write_all(f, b"{}")).unwrap();
/// let err = files.write(dir.join("b.bin"), |_| Err(std::io::Error::other("disk full")));
/// assert!(err.is_err());
/// drop(files); // not committed: nothing was written
/// assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
#[derive(Default)]
pub struct AtomicFiles {
    /// Each written temporary file, with the target it replaces and that target's folder.
    staged: Vec<(TempFile, PathBuf, PathBuf)>,
}

impl AtomicFiles {
    /// No files yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Writes the new content of `path` (through its symbolic links, as `File::create`
    /// writes) with `write` into a temporary file beside it, synced, with the permissions
    /// of the file it will replace; the leftovers of crashed saves of `path` are removed
    /// first.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file, for a failure of `write` or of the file system (the
    /// temporary file is removed; what was written before stays staged).
    pub fn write(&mut self, path: impl AsRef<Path>, write: impl FnOnce(&mut File) -> io::Result<()>) -> Result<()> {
        let given = path.as_ref();
        let io_err = |source| Error::Io { path: given.to_path_buf(), source };
        // A symbolic link is written through, as `File::create` writes: the link stays, its
        // target gets the new contents (a rename over the link would replace the link with a
        // file and leave the target stale).
        let resolved = resolve_links(given).map_err(io_err)?;
        let dir = match resolved.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = resolved
            .file_name()
            .ok_or_else(|| io_err(io::Error::new(io::ErrorKind::InvalidInput, "not a file path")))?;
        remove_crash_leftovers(&dir, name);
        let tmp = dir.join(format!(
            "{}{}-{}",
            temp_prefix(name),
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let guard = (|| {
            let (guard, mut file) = TempFile::create(tmp)?;
            // The new file keeps the permissions of the one it replaces, as a write into
            // it would (a private `0600` checkpoint must not become world-readable). Its
            // owner is the saver, as for any new file.
            if let Ok(old) = std::fs::metadata(&resolved) {
                if old.is_file() {
                    file.set_permissions(old.permissions())?;
                }
            }
            write(&mut file)?;
            file.flush()?;
            file.sync_all()?;
            Ok(guard)
        })()
        .map_err(io_err)?;
        self.staged.push((guard, resolved, dir));
        Ok(())
    }

    /// Renames every written file into place, in the order written, and syncs their
    /// folders so that the renames are durable.
    ///
    /// # Errors
    /// [`Error::Io`] naming the target whose rename failed; the targets before it are
    /// already replaced, the temporary files of the others are removed.
    pub fn commit(mut self) -> Result<()> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        for (guard, target, dir) in std::mem::take(&mut self.staged) {
            guard.commit(&target).map_err(|source| Error::Io { path: target.clone(), source })?;
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
        // Make the renames themselves durable (best effort: not every platform can open a dir).
        for dir in dirs {
            if let Ok(d) = File::open(&dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }
}

/// `path` with its symbolic links followed (to a target that may not exist yet), or
/// `path` itself when it is not a link.
fn resolve_links(path: &Path) -> io::Result<PathBuf> {
    let mut at = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = std::fs::read_link(&at)?;
                at = match at.parent() {
                    Some(dir) if target.is_relative() => dir.join(target),
                    _ => target,
                };
            }
            _ => return Ok(at),
        }
    }
    Err(io::Error::new(io::ErrorKind::InvalidInput, "too many levels of symbolic links"))
}

/// The regular file a rename to `to` is about to replace, held open (Unix) so that the
/// rename only unlinks its name: the file system frees its blocks when the last handle
/// closes, which [`release_in_background`] does off the saving thread. Freeing 64 MB is a
/// large part of an overwriting save where the file system discards freed blocks (ext4
/// mounted with `discard`; the `compare.py` row `state_dict_save_64MB` overwrites its
/// file on every save). Elsewhere (an open file cannot be renamed over on Windows),
/// `None`.
fn open_replaced(to: &Path) -> Option<File> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Non-blocking, so that a FIFO at `to` cannot hang the save here.
        let file = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(to).ok()?;
        file.metadata().ok()?.is_file().then_some(file)
    }
    #[cfg(not(unix))]
    {
        let _ = to;
        None
    }
}

/// Closes `file` on a short-lived thread (or here, if no thread can be started).
fn release_in_background(file: File) {
    // A failed spawn drops the closure, and with it the file, on this thread.
    let _ = std::thread::Builder::new().name("nn-io-release".into()).spawn(move || drop(file));
}

/// Bytes written between two requests to start writing back in [`EarlyWriteback`].
const WRITEBACK_STEP: u64 = 8 << 20;

/// A writer over a file written sequentially from offset 0 that asks the kernel (Linux)
/// to start writing each 8 MiB to disk as soon as it is written, so that the closing
/// `fsync` waits for the tail only instead of for the whole file: the disk works while
/// the rest is encoded (without it, a 64 MB save's `fsync` waits for the whole file after
/// the last write: the `compare.py` row `state_dict_save_64MB`). Only a hint: the data are
/// durable once `fsync` returns, and a write-back error is reported by that `fsync` (so
/// nothing is lost silently). Elsewhere a plain writer.
pub(crate) struct EarlyWriteback<'a> {
    file: &'a File,
    written: u64,
    started: u64,
}

impl<'a> EarlyWriteback<'a> {
    pub(crate) fn new(file: &'a File) -> Self {
        EarlyWriteback { file, written: 0, started: 0 }
    }
}

impl Write for EarlyWriteback<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = (&mut &*self.file).write(buf)?;
        self.written += n as u64;
        if self.written - self.started >= WRITEBACK_STEP {
            #[cfg(target_os = "linux")]
            {
                use std::os::fd::AsRawFd;
                let (Ok(off), Ok(len)) =
                    (libc::off64_t::try_from(self.started), libc::off64_t::try_from(self.written - self.started))
                else {
                    return Ok(n);
                };
                // SAFETY: a valid open descriptor; the call only schedules write-back
                // of that range (its result is a hint, see the type's docs).
                unsafe { libc::sync_file_range(self.file.as_raw_fd(), off, len, libc::SYNC_FILE_RANGE_WRITE) };
            }
            self.started = self.written;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        (&mut &*self.file).flush()
    }
}

/// `.NAME.tmp-`: what every temporary file of target `NAME` starts with.
fn temp_prefix(name: &OsStr) -> String {
    format!(".{}.tmp-", name.to_string_lossy())
}

/// The pid in a temporary file name of the target (`<prefix><pid>-<n>`), if it is one.
fn temp_file_pid(file_name: &OsStr, prefix: &str) -> Option<u32> {
    let rest = file_name.to_str()?.strip_prefix(prefix)?;
    let (pid, n) = rest.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(pid) || !digits(n) {
        return None;
    }
    pid.parse().ok()
}

/// Removes the temporary files of target `name` in `dir` that no running save owns (the
/// rule is in the module docs). Best effort: a folder that cannot be listed is skipped.
fn remove_crash_leftovers(dir: &Path, name: &OsStr) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let prefix = temp_prefix(name);
    let me = std::process::id();
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(pid) = temp_file_pid(&file_name, &prefix) else { continue };
        let path = entry.path();
        let leftover = if pid == me {
            !in_flight().as_ref().is_some_and(|set| set.contains(&path))
        } else {
            !process_is_alive(pid)
        };
        if leftover {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// Whether a process with this pid runs now (conservatively true where it cannot be told).
fn process_is_alive(pid: u32) -> bool {
    #[cfg(unix)]
    {
        let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
        if pid <= 0 {
            // 0 and negative values address process groups, not a process.
            return false;
        }
        // SAFETY: signal 0 only checks that the process exists and may be signalled.
        if unsafe { libc::kill(pid, 0) } == 0 {
            return true;
        }
        // EPERM: it exists but belongs to someone else.
        io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        true
    }
}

/// Opens `path` for reading if it is a regular file, with its length.
///
/// The check is made on the opened file (no window for a swap between a check and the
/// open), and on Unix the open itself does not block: a FIFO without a writer would
/// otherwise hang in `open` forever.
///
/// ```
/// let e = nn_core::io::open_regular("/dev/null").unwrap_err();
/// assert!(e.to_string().contains("is not a regular file (a character device)"), "{e}");
/// ```
///
/// # Errors
/// [`Error::Io`] when the file cannot be opened; [`Error::NotARegularFile`] for a
/// directory, FIFO, socket or device.
pub fn open_regular(path: impl AsRef<Path>) -> Result<(File, u64)> {
    let path = path.as_ref();
    let io_err = |source| Error::Io { path: path.to_path_buf(), source };
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(io_err)?;
    let meta = file.metadata().map_err(io_err)?;
    if !meta.is_file() {
        return Err(Error::NotARegularFile { path: path.to_path_buf(), kind: file_kind(&meta.file_type()) });
    }
    Ok((file, meta.len()))
}

/// Files at least this large are memory-mapped for loading; smaller ones are read.
const MMAP_THRESHOLD: u64 = 16 << 20;

/// Runs `f` on the bytes of the regular file at `path` ([`open_regular`]): mapped when
/// the file is large, read otherwise, and at most the length it had when opened.
pub(crate) fn with_file_bytes<R>(path: &Path, f: impl FnOnce(&[u8]) -> Result<R>) -> Result<R> {
    let io_err = |source| Error::Io { path: path.to_path_buf(), source };
    let (file, len) = open_regular(path)?;
    if len >= MMAP_THRESHOLD {
        // SAFETY: the map is read-only and dropped before returning; the loaders copy
        // every tensor out of it. Concurrent truncation of the file by another process is
        // the one hazard of any mmap-based reader and is not defended against.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io_err)?;
        f(&map)
    } else {
        // At most the length the file had when opened: a file growing meanwhile is not
        // followed.
        let mut bytes = Vec::with_capacity(len as usize);
        std::io::Read::read_to_end(&mut std::io::Read::take(&file, len), &mut bytes).map_err(io_err)?;
        f(&bytes)
    }
}

/// What a non-regular file is, for messages.
fn file_kind(t: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if t.is_dir() {
        "a directory"
    } else {
        "an unknown kind of file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A replaced file's permissions are kept (the temporary file was created 0666 less
    /// the umask: a 0600 checkpoint became world-readable).
    #[cfg(unix)]
    #[test]
    fn the_replaced_files_permissions_are_kept() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ck.bin");
        std::fs::write(&p, b"old").unwrap();
        for mode in [0o600, 0o640, 0o444] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            atomic_write(&p, |f| f.write_all(b"new")).unwrap();
            assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, mode);
            assert_eq!(std::fs::read(&p).unwrap(), b"new");
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_symbolic_link_is_written_through() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("run3")).unwrap();
        let target = dir.path().join("run3").join("ckpt.bin");
        std::fs::write(&target, b"old").unwrap();
        let link = dir.path().join("latest.bin");
        std::os::unix::fs::symlink("run3/ckpt.bin", &link).unwrap();
        atomic_write(&link, |f| f.write_all(b"new")).unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link stays a link");
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        // A dangling link creates its target.
        let dangling = dir.path().join("next.bin");
        std::os::unix::fs::symlink("run3/next.bin", &dangling).unwrap();
        atomic_write(&dangling, |f| f.write_all(b"x")).unwrap();
        assert_eq!(std::fs::read(dir.path().join("run3").join("next.bin")).unwrap(), b"x");
        assert_eq!(std::fs::read_dir(dir.path().join("run3")).unwrap().count(), 2, "no temporary file left");
    }

    #[test]
    fn early_writeback_writes_every_byte_and_overwrites_keep_old_readers_whole() {
        let dir = std::env::temp_dir().join(format!("nn-io-wb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("big.bin");
        // Past two write-back steps, in uneven writes.
        let data: Vec<u8> = (0..(2 * WRITEBACK_STEP + 12345)).map(|i| (i * 7 % 251) as u8).collect();
        atomic_write(&p, |f| {
            let mut w = EarlyWriteback::new(f);
            for part in data.chunks(3 << 20) {
                w.write_all(part)?;
            }
            w.flush()
        })
        .unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), data);
        // A reader of the replaced file keeps reading it whole; the target is the new one.
        let mut old = File::open(&p).unwrap();
        atomic_write(&p, |f| f.write_all(b"new")).unwrap();
        let mut back = Vec::new();
        io::Read::read_to_end(&mut old, &mut back).unwrap();
        assert_eq!(back, data);
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
