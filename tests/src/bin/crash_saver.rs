//! The child process of the crash tests (`tests/tests/it/crash.rs`), which SIGKILL it
//! in the middle of a save.
//!
//! `crash_saver <path> loop`: saves a 32 MB state dict to `<path>` over and over.
//! `crash_saver <path> hang`: starts one atomic save of `<path>`, writes part of it and
//! then waits forever (a save in progress that never ends).

use std::io::Write;

use nn_core::{StateDict, Tensor};

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(path), Some(mode)) = (args.next(), args.next()) else {
        eprintln!("usage: crash_saver <path> loop|hang");
        std::process::exit(2);
    };
    match mode.as_str() {
        "loop" => {
            let mut sd = StateDict::new();
            sd.insert("w".into(), Tensor::ones(&[8 << 20]));
            for i in 0i64.. {
                sd.insert("i".into(), Tensor::from_vec_i64(vec![i], &[]));
                sd.save(&path).expect("save");
            }
        }
        "hang" => {
            nn_core::io::atomic_write(&path, |f| {
                f.write_all(b"partial")?;
                f.flush()?;
                loop {
                    std::thread::sleep(std::time::Duration::from_secs(1));
                }
            })
            .expect("save");
        }
        other => {
            eprintln!("unknown mode `{other}`");
            std::process::exit(2);
        }
    }
}
