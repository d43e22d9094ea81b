//! The limiter tables (`weir::table`, `weir::limiter`) in one test binary: GCRA, sliding and
//! concurrency tables in process and shared memory (`gcra`), each algorithm against a
//! reference model (`models`), the exact sliding log (`log`).
//!
//! Beside it, their own binaries (Cargo.toml): forked processes on one region
//! (`multiprocess`, `log_multiprocess`), a counting allocator (`no_alloc`), resident memory
//! (`table_memory`) and the loom models (`loom`, `loom_log`, `make loom`).

#[path = "../common/mod.rs"]
mod common;

mod gcra;
mod log;
mod models;
