//! Saves killed midway: the target is always a complete file, and the next save removes
//! the killed save's temporary files, while saves in progress (in another process or on
//! another thread) keep theirs. The child process is `src/bin/crash_saver.rs`.

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use nn_core::{StateDict, Tensor};

const TARGET: &str = "model.safetensors";

/// The temporary files of `TARGET` in `dir`.
fn temp_files(dir: &Path) -> Vec<String> {
    let prefix = format!(".{TARGET}.tmp-");
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    v.sort();
    v
}

fn saver(path: &Path, mode: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_crash_saver")).arg(path).arg(mode).spawn().unwrap()
}

/// Waits until `child` has a temporary file of `TARGET` (it is in the middle of a save).
fn wait_for_temp_file(dir: &Path, child: &mut Child) {
    let prefix = format!(".{TARGET}.tmp-{}-", child.id());
    let start = Instant::now();
    while !temp_files(dir).iter().any(|n| n.starts_with(&prefix)) {
        assert!(child.try_wait().unwrap().is_none(), "the saver exited");
        assert!(start.elapsed() < Duration::from_secs(60), "the saver never started a save");
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn small() -> StateDict {
    [("w".to_string(), Tensor::zeros(&[4]))].into_iter().collect()
}

#[test]
fn saves_after_a_killed_save_remove_its_leftovers() {
    // 5 kills per test run; NN_CRASH_KILLS sets more (the reliability report uses 100).
    let kills: u64 = std::env::var("NN_CRASH_KILLS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(TARGET);
    small().save(&path).unwrap();
    let (mut left_by_kills, mut survived) = (0, 0);
    for k in 0..kills {
        let mut child = saver(&path, "loop");
        wait_for_temp_file(dir.path(), &mut child);
        // Kill at varied points of the write.
        std::thread::sleep(Duration::from_micros(k * 7919 % 20_000));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        // The target is whole: the first version or one of the child's saves.
        let sd = StateDict::load(&path).expect("a killed save damaged the target");
        assert!(sd.len() == 1 || sd.get("w").unwrap().numel() == 8 << 20);
        left_by_kills += usize::from(!temp_files(dir.path()).is_empty());
        small().save(&path).unwrap();
        assert_eq!(temp_files(dir.path()), Vec::<String>::new(), "after kill {k}");
        survived += 1;
    }
    assert!(left_by_kills > 0, "no kill landed mid-save: nothing was tested");
    eprintln!("{survived} kills survived, {left_by_kills} left temporary files, all removed by the next save");
}

#[test]
fn saves_in_progress_keep_their_temporary_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(TARGET);
    // Another process, alive and writing.
    let mut child = saver(&path, "hang");
    wait_for_temp_file(dir.path(), &mut child);
    let theirs = temp_files(dir.path());
    small().save(&path).unwrap();
    assert_eq!(temp_files(dir.path()), theirs, "a live process's save lost its temporary file");
    child.kill().unwrap();
    child.wait().unwrap();
    small().save(&path).unwrap();
    assert!(temp_files(dir.path()).is_empty());

    // Another thread of this process.
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let p = path.clone();
    let writer = std::thread::spawn(move || {
        nn_core::io::atomic_write(&p, |f| {
            std::io::Write::write_all(f, b"from the thread")?;
            started_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            Ok(())
        })
    });
    started_rx.recv().unwrap();
    let ours = temp_files(dir.path());
    assert_eq!(ours.len(), 1);
    small().save(&path).unwrap();
    assert_eq!(temp_files(dir.path()), ours, "another thread's save lost its temporary file");
    go_tx.send(()).unwrap();
    writer.join().unwrap().unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"from the thread");
    assert!(temp_files(dir.path()).is_empty());
}

#[test]
fn a_panicking_writer_leaves_no_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(TARGET);
    small().save(&path).unwrap();
    let before = std::fs::read(&path).unwrap();
    let r = std::panic::catch_unwind(|| {
        nn_core::io::atomic_write(&path, |f| {
            std::io::Write::write_all(f, b"half")?;
            panic!("writer bug")
        })
    });
    assert!(r.is_err());
    assert!(temp_files(dir.path()).is_empty());
    assert_eq!(std::fs::read(&path).unwrap(), before);
    // Files that only look alike are never touched.
    for name in [format!(".{TARGET}.tmp-1"), format!(".{TARGET}.tmp-x-1"), format!("{TARGET}.tmp-1-1")] {
        std::fs::write(dir.path().join(&name), b"keep").unwrap();
    }
    small().save(&path).unwrap();
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 4);
}
