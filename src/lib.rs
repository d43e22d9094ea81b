//! weir: an embeddable HTTP rate-limit engine.
pub mod limiter;
pub mod policy;
pub mod table;
