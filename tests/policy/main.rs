//! The policy layer (`weir::policy`) in one test binary: the policy format and its checks,
//! matching and `$uri` normalization, the engine's verdicts, counters and metrics, host
//! limits, shared regions, and the shared vectors (`vectors`, `tests/vectors/README.md`).
//!
//! Beside it, in its own binary (a counting allocator): `engine_no_alloc` (`no_alloc.rs`).

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/engine_fixture.rs"]
mod fixture;
#[path = "../common/promcheck.rs"]
mod promcheck;
#[path = "../common/vector.rs"]
mod vector;

mod bans;
mod capacity;
mod charge_on_status;
mod classset_props;
mod engine_attach;
mod engine_counters;
mod engine_header_walk;
mod engine_order;
mod engine_reads;
mod examples;
mod fast_path;
mod host_limits;
mod key_secrets;
mod keyops;
mod keyops_access;
mod log_policy;
mod metrics;
mod metrics_documented;
mod nginx_uri;
mod normalize_props;
mod permits;
mod policy_config;
mod policy_files;
mod policy_iglob;
mod reload_rate;
mod renew;
mod topkeys;
mod topkeys_flood;
mod vectors;
mod wiki_example;
mod zone_rules;
