//! Policy engine: request view → normalized URI → matched classes → keys → limits.
mod bounded;
mod bytes;
pub mod config;
pub mod counters;
pub mod engine;
pub mod key;
pub mod key_text;
pub mod keyops;
pub mod ledger;
pub mod matching;
pub mod metrics;
pub mod net;
pub mod request;
pub mod saturation;
#[cfg(test)]
mod test_rng;
pub mod topkeys;

pub use config::zone_size;
pub use config::{
    load_policy, parse_policy, CompiledPolicy, HostLimit, HostLimits, HostZone, PolicyError,
};
pub use engine::{Action, Engine, EvalError, Outcome};
pub use matching::{classset, normalize};
pub use request::{OwnedRequest, RequestView};

/// The matchers and IP networks under their earlier, shared name.
pub mod matcher {
    pub use super::matching::*;
    pub use super::net::*;
}
