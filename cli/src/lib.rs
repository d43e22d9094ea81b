//! The `weir` command line: check policies, replay access logs against a policy, watch a live
//! status (`top`), inspect, reset or unban one key (`key`).
pub mod agreement;
pub mod check;
pub mod escape;
pub mod incident;
pub mod input;
pub mod key;
pub mod logfmt;
mod reorder;
pub mod replay;
pub mod report;
pub mod timefmt;
pub mod top;
pub mod topn;
pub mod unlogged;
