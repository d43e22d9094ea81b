//! Policy engine: request view → normalized URI → matched classes → keys → limits.
pub mod config;
pub mod key;
pub mod matcher;
pub mod normalize;
pub mod request;
