//! Policy engine: request view → normalized URI → matched classes → keys → limits.
mod bounded;
mod bytes;
pub mod classset;
pub mod config;
pub mod counters;
pub mod engine;
pub mod key;
pub mod ledger;
pub mod matcher;
pub mod metrics;
pub mod normalize;
pub mod request;
mod target_scan;
#[cfg(test)]
mod test_rng;
pub mod zone_size;

pub use config::{load_policy, parse_policy, CompiledPolicy, PolicyError};
pub use engine::{Action, Engine, EvalError, Outcome};
pub use request::{OwnedRequest, RequestView};
