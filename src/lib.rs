//! weir: an embeddable HTTP rate-limit engine.
//!
//! Layers, data flowing one way: [`policy`] (request → limits) → [`limiter`] (pure state
//! transitions) → [`table`] (lock-free fixed-memory storage, shareable across processes).
pub mod clock;
pub mod cluster;
pub mod limiter;
pub mod policy;
pub mod table;
