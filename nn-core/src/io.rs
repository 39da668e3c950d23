//! Crash-safe file writes: write a temporary file in the destination's folder, flush it
//! to disk, then rename it over the destination. A crash or error at any point leaves
//! either the old file or the new one, never a mix.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `path` atomically: `write` fills a temporary file in the same folder, which is
/// then synced and renamed over `path` (and the folder synced, so the rename is durable).
/// If `write` or any step fails, the temporary file is removed and `path` is untouched.
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
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
///
/// # Errors
/// [`Error::Io`] naming the file, for a failure of `write` or of the file system.
pub fn atomic_write(path: impl AsRef<Path>, write: impl FnOnce(&mut File) -> io::Result<()>) -> Result<()> {
    let path = path.as_ref();
    let io_err = |source| Error::Io { path: path.to_path_buf(), source };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name =
        path.file_name().ok_or_else(|| io_err(io::Error::new(io::ErrorKind::InvalidInput, "not a file path")))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}-{}",
        name.to_string_lossy(),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut file = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        write(&mut file)?;
        file.flush()?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, path)?;
        // Make the rename itself durable (best effort: not every platform can open a dir).
        if let Ok(d) = File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(io_err)
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
