//! weir: an embeddable HTTP rate-limit engine.
//!
//! Layers, each importing only the ones listed before it:
//!
//! 1. [`clock`]: the time base.
//! 2. [`limiter`]: pure state transitions `(state, now, cost) → (state, verdict)`; imports
//!    nothing else of the crate.
//! 3. [`table`]: lock-free fixed-memory storage of limiter states, shareable across processes
//!    (imports `limiter`, `clock`).
//! 4. [`cluster`]: zones shared by several nodes through Redis/Valkey (imports `table`,
//!    `limiter`, `clock`).
//! 5. [`policy`]: request → limits → verdicts, over the layers above. Inside it, again one
//!    way: `bytes`, `net`, `counters`, `ledger` → `request`, `bounded` → `matching` → `key` → `config`
//!    → `engine` → `metrics`.
pub mod clock;
pub mod cluster;
pub mod limiter;
pub mod policy;
pub mod region;
pub mod table;
