//! Request matching: URI normalization, globs, value matchers, URL shapes, classes and the
//! class set that finds a request's classes in one pass.
//!
//! Matching reads requests (`super::request`) and IP networks (`super::net`); neither of
//! those imports anything from here.
//!
//! Everything here is built once from the policy file (see
//! [`crate::policy::config`]) and evaluated per request against a
//! [`PreparedRequest`]. Evaluation does not allocate on the common path:
//! regexes are pre-compiled (`regex::bytes`), globs are pre-tokenized, CIDRs
//! are integer ranges and header names are stored lowercase. The only
//! allocation is a fallback buffer when a query argument longer than 2 KiB
//! has to be percent-decoded.
//!
//! Semantics (documented for operators in `docs/POLICY.md`):
//! * a [`Class`] matches when **any** of its [`Shape`]s matches;
//! * a [`Shape`] matches when **all** of its listed tests match;
//! * a test with a list of values (e.g. `path_glob = ["*.css", "*.js"]`)
//!   passes when **any** value matches;
//! * header, cookie and query tests look at **every** occurrence of the name
//!   and pass when any occurrence matches (`present = false` passes only when
//!   there is no occurrence). Matching any occurrence prevents bypassing a class
//!   by sending a harmless duplicate first (`?title=x&title=Special:…`, PHP
//!   uses the last one).

use std::fmt;

use regex::bytes::Regex;

use super::bytes;
use super::net::CidrSet;
use super::request::{CookieName, PreparedRequest};

pub mod classset;
mod glob;
pub mod normalize;
mod query;
mod shape;
mod target_scan;
#[cfg(test)]
mod tests;

pub use glob::*;
use normalize::decode_component;
#[cfg(test)]
use normalize::query_args;
use query::*;
pub use shape::*;

/// Query arguments up to this many bytes are percent-decoded on the stack.
pub const QUERY_STACK_BUF: usize = 512;
