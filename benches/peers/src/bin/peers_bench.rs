//! The peers' benchmark harness: times the `nn_bench` workloads in candle, burn (Flex CPU
//! backend) or the raw `gemm` crate and prints one JSON object per line, like `nn_bench`
//! (`{"workload", "median_ms", "unit", "throughput"}`). Threads are set by the caller through
//! `RAYON_NUM_THREADS`.
//!
//! ```text
//! cargo build --release --manifest-path benches/peers/Cargo.toml
//! RAYON_NUM_THREADS=1 benches/peers/target/release/peers_bench candle cnn
//! ```

use std::process::ExitCode;

use nn_peers_bench::{burn_peer, candle_peer, gemm_peer, Filter};

const USAGE: &str = "usage: peers_bench candle|burn|gemm [workload-prefix]";

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(peer), filter) = (args.next(), Filter(args.next())) else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    if args.next().is_some() {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    }
    match peer.as_str() {
        "candle" => {
            if let Err(e) = candle_peer::run(&filter) {
                eprintln!("candle: {e}");
                return ExitCode::FAILURE;
            }
        }
        "burn" => burn_peer::run(&filter),
        "gemm" => gemm_peer::run(&filter),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}
