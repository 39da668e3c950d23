//! Benchmark harness of the nn framework (see `benches/`).
