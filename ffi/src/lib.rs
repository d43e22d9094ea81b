//! The C ABI of weir (`libweir.a`, `libweir.so`, `include/weir.h`).
//!
//! Rules every entry point follows:
//! - It never unwinds into C: the body runs under `catch_unwind` and a panic becomes
//!   `WEIR_ERR_PANIC`.
//! - NULL pointers and impossible lengths are reported (`WEIR_ERR_NULL`, `WEIR_ERR_INVALID`),
//!   never dereferenced.
//! - Memory allocated here is freed only by the matching `weir_*_free`.
//! - Handles: `weir_policy`, `weir_engine`, `weir_zone` and `weir_limiter` are immutable after
//!   creation and safe to use from any number of threads at once; only their `_free` must not
//!   race with other use. `weir_error` belongs to the caller's thread.

#![allow(clippy::missing_safety_doc)] // The safety contract of every function is in weir.h.
#![allow(non_camel_case_types)] // C names: weir_engine, weir_verdict, ...

mod reload;

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::net::IpAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use weir::cluster::ClusterShared;
use weir::limiter::{Concurrency, Decision, Delay, Gcra, Permit, Rate, SlidingWindow};
use weir::policy::counters::Counters;
use weir::policy::engine::{Action, Permits, QueueTicket, RawPermit, MAX_PERMITS};
use weir::policy::ledger::Ledger;
use weir::policy::{CompiledPolicy, Engine, RequestView};
use weir::table::Table;

/// Success.
pub const WEIR_OK: c_int = 0;
/// A required pointer was NULL.
pub const WEIR_ERR_NULL: c_int = -1;
/// An argument is out of range (a length too large, bad UTF-8 where text is required, an
/// unparsable peer address, a handle of the wrong kind).
pub const WEIR_ERR_INVALID: c_int = -2;
/// The policy is invalid; the error object says where (file:line:col) and why.
pub const WEIR_ERR_POLICY: c_int = -3;
/// A zone could not be created or attached (too small, misaligned, layout changed).
pub const WEIR_ERR_ZONE: c_int = -4;
/// The request is one to answer 400 for: a target nginx answers 400 for, or more than
/// `WEIR_MAX_HEADER_VALUES` values of one header the policy reads.
pub const WEIR_ERR_BAD_TARGET: c_int = -5;
/// The caller's buffer is too small; the needed size is reported.
pub const WEIR_ERR_BUFFER_TOO_SMALL: c_int = -6;
/// An internal error (a bug): weir caught a panic. The process is unaffected.
pub const WEIR_ERR_PANIC: c_int = -7;
/// A file could not be read.
pub const WEIR_ERR_IO: c_int = -8;

/// Verdict actions.
pub const WEIR_PASS: i32 = 0;
pub const WEIR_DELAY: i32 = 1;
pub const WEIR_REJECT: i32 = 2;
pub const WEIR_QUEUE: i32 = 3;

/// Largest byte length any single argument may have (1 GiB): anything larger is a bug.
const MAX_LEN: usize = 1 << 30;

/// An error: a message, with file:line:col for policy errors. Free with `weir_error_free`.
pub struct weir_error {
    message: CString,
}

/// A parsed, validated policy. Immutable; thread-safe.
pub struct weir_policy {
    policy: CompiledPolicy,
}

/// A policy with its zones' tables: evaluates requests. Thread-safe.
pub struct weir_engine {
    engine: Engine,
}

/// One limiter table (an nginx-style zone), in process memory or in a caller's region.
/// Thread-safe; usable from several processes when the region is shared.
pub struct weir_zone {
    table: Table,
    /// The permits `weir_zone_acquire` handed out in this process and not yet released.
    ledger: Ledger,
}

impl weir_zone {
    fn new(table: Table) -> weir_zone {
        weir_zone {
            table,
            ledger: Ledger::new(true),
        }
    }
}

/// A limiting algorithm with its parameters (GCRA, sliding window or concurrency).
pub struct weir_limiter {
    kind: LimiterKind,
}

enum LimiterKind {
    Gcra(Gcra),
    Sliding(SlidingWindow),
    Concurrency(Concurrency),
}

/// Header lookup for `weir_request`: store a pointer to the `nth` (0-based) value of header
/// `lname` (lowercase ASCII, `lname_len` bytes) in `*value`/`*value_len` and return 1, or return
/// 0 when there is no such occurrence. The value must stay valid until the evaluating call
/// returns. The engine asks for the occurrences of a name in order (`nth` 0, 1, 2 …, each walk
/// starting at 0 within one evaluating call): answer `nth` right after `nth - 1` by resuming
/// after the previous occurrence, or a request with n repeated lines costs O(n²).
pub type weir_header_fn = Option<
    unsafe extern "C" fn(
        ctx: *mut c_void,
        lname: *const u8,
        lname_len: usize,
        nth: usize,
        value: *mut *const u8,
        value_len: *mut usize,
    ) -> c_int,
>;

/// A request, as (pointer, length) views valid for the duration of the call.
#[repr(C)]
pub struct weir_request {
    pub method: *const u8,
    pub method_len: usize,
    /// The raw request target as in the request line (origin or absolute form).
    pub target: *const u8,
    pub target_len: usize,
    /// The directly connected peer's address as text ("192.0.2.1", "2001:db8::1"). For a
    /// connection without an IP address (a unix-domain socket) pass length 0, or text that
    /// starts with "unix:" (as nginx writes such a peer): the request counts for the local
    /// client (`trusted_proxies = ["unix:"]` trusts it, docs/POLICY.md).
    pub peer: *const u8,
    pub peer_len: usize,
    /// May be NULL: the request then has no headers.
    pub header: weir_header_fn,
    pub header_ctx: *mut c_void,
}

/// A concurrency permit or queue place. `limit < 0` means empty. Copies are harmless: once
/// one copy is released (or abandoned), releasing another changes nothing (`generation`
/// tells them apart).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct weir_permit {
    pub limit: i32,
    pub key_hash: u64,
    pub bucket: u64,
    pub generation: u64,
}

const NO_PERMIT: weir_permit = weir_permit {
    limit: -1,
    key_hash: 0,
    bucket: 0,
    generation: 0,
};

/// Most values of one header name the engine asks a `weir_header_fn` for (0 to this many
/// minus one, then one more to learn whether there are more). A request with more values of a
/// header the policy reads gets WEIR_ERR_BAD_TARGET (answer 400) and nothing is charged.
pub const WEIR_MAX_HEADER_VALUES: usize = 65_536;
const _: () = assert!(WEIR_MAX_HEADER_VALUES == weir::policy::engine::MAX_HEADER_VALUES);

/// Number of permits a verdict can hold.
pub const WEIR_MAX_PERMITS: usize = 4;

/// The engine's answer for one request.
#[repr(C)]
pub struct weir_verdict {
    /// WEIR_PASS, WEIR_DELAY, WEIR_REJECT or WEIR_QUEUE.
    pub action: i32,
    /// Response status for WEIR_REJECT (and a queue that times out).
    pub status: u16,
    /// Set when no limit matched the request.
    pub unmatched: u8,
    /// For WEIR_DELAY: how long to hold the request.
    pub wait_ns: u64,
    /// For WEIR_REJECT: the Retry-After value, whole seconds rounded up.
    pub retry_after_s: u64,
    /// Index of the deciding limit (`weir_engine_limit_name`), or -1.
    pub limit: i32,
    /// Index of the matching exemption, or -1.
    pub exempt: i32,
    /// A dry-run limit that would have delayed or rejected, or -1; and what it would have done.
    pub dry_run_limit: i32,
    pub dry_run_action: i32,
    /// Bytes written to the caller's header buffer: lines "Name: value\r\n".
    pub headers_len: usize,
    /// Set when the header buffer was too small and lines were left out.
    pub headers_truncated: u8,
    /// Concurrency permits held by an admitted request: release with `weir_engine_release`.
    pub permits: [weir_permit; WEIR_MAX_PERMITS],
    /// For WEIR_QUEUE: the queue place (pass the verdict back to `weir_engine_evaluate_queued`
    /// or `weir_engine_abandon`).
    pub ticket: weir_permit,
}

/// One low-level check (`weir_zone_check`, `weir_zone_acquire`).
#[repr(C)]
pub struct weir_check {
    /// WEIR_PASS, WEIR_DELAY or WEIR_REJECT.
    pub action: i32,
    pub wait_ns: u64,
    pub retry_after_ns: u64,
    /// Quota, remaining and time to full quota (for RateLimit headers).
    pub limit: u64,
    pub remaining: u64,
    pub reset_ns: u64,
}

/// A zone's counters.
#[repr(C)]
pub struct weir_zone_stats {
    pub capacity: u64,
    pub occupancy: u64,
    pub inserts: u64,
    pub evicted_expired: u64,
    pub evicted_active: u64,
    pub longest_probe: u64,
    pub passed: u64,
    pub delayed: u64,
    pub rejected: u64,
}

impl From<weir::table::TableStats> for weir_zone_stats {
    fn from(s: weir::table::TableStats) -> Self {
        weir_zone_stats {
            capacity: s.capacity,
            occupancy: s.occupancy,
            inserts: s.inserts,
            evicted_expired: s.evicted_expired,
            evicted_active: s.evicted_active,
            longest_probe: s.longest_probe,
            passed: s.passed,
            delayed: s.delayed,
            rejected: s.rejected,
        }
    }
}

/// What a policy's zone needs (for hosts that place zones in shared memory).
#[repr(C)]
pub struct weir_zone_info {
    /// The zone's name (not NUL-terminated), valid as long as the policy.
    pub name: *const u8,
    pub name_len: usize,
    /// Region size in bytes.
    pub bytes: usize,
    /// Pass to `weir_zone_attach`; a reload that changes it is refused.
    pub schema: u64,
    /// For a `scope = "cluster"` zone: bytes of its shared cluster region (the other nodes'
    /// counts, what this node pushed, sync health and cluster stats), to give to
    /// `weir_engine_attach_shared` when several processes share the zone; 0 for a local zone.
    pub cluster_bytes: usize,
}

/// A caller-provided memory region (e.g. an nginx shared-memory zone), 64-byte aligned.
#[repr(C)]
pub struct weir_region {
    pub ptr: *mut c_void,
    pub len: usize,
}

// ---------------------------------------------------------------------------------------------
// Plumbing

/// Runs `f`, turning a panic into `WEIR_ERR_PANIC`.
fn guard(f: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(WEIR_ERR_PANIC)
}

/// Stores an error message in `*err` when `err` is not NULL.
unsafe fn set_error(err: *mut *mut weir_error, msg: impl std::fmt::Display) {
    if err.is_null() {
        return;
    }
    let text = msg.to_string().replace('\0', "\\0");
    let message = CString::new(text).unwrap_or_default();
    give(err, weir_error { message });
}

/// A byte view from (ptr, len): NULL is allowed only for len 0.
unsafe fn bytes<'a>(p: *const u8, len: usize) -> Result<&'a [u8], c_int> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(WEIR_ERR_NULL);
    }
    if len > MAX_LEN {
        return Err(WEIR_ERR_INVALID);
    }
    Ok(std::slice::from_raw_parts(p, len))
}

/// Hands a new object to the caller through `out` (checked non-NULL by the caller).
unsafe fn give<T>(out: *mut *mut T, value: T) -> c_int {
    *out = Box::into_raw(Box::new(value));
    WEIR_OK
}

/// Frees an object made by [`give`]; NULL is ignored and a panic in a destructor is contained.
unsafe fn take_back<T>(p: *mut T) {
    if !p.is_null() {
        let _ = catch_unwind(AssertUnwindSafe(|| drop(Box::from_raw(p))));
    }
}

fn fail(err: *mut *mut weir_error, code: c_int, msg: impl std::fmt::Display) -> c_int {
    // SAFETY: `err` is NULL or points at a writable `weir_error*` (the header's contract).
    unsafe { set_error(err, msg) };
    code
}

// ---------------------------------------------------------------------------------------------
// Version, clock, errors

/// The library version, a static NUL-terminated string.
#[no_mangle]
pub extern "C" fn weir_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// CLOCK_MONOTONIC in nanoseconds: the time base every `now` argument uses.
#[no_mangle]
pub extern "C" fn weir_now_ns() -> u64 {
    weir::clock::monotonic_ns()
}

/// The error's message (NUL-terminated, valid until `weir_error_free`); "" for NULL.
#[no_mangle]
pub unsafe extern "C" fn weir_error_message(err: *const weir_error) -> *const c_char {
    if err.is_null() {
        return c"".as_ptr();
    }
    (*err).message.as_ptr()
}

/// Frees an error (NULL is ignored).
#[no_mangle]
pub unsafe extern "C" fn weir_error_free(err: *mut weir_error) {
    take_back(err)
}

// ---------------------------------------------------------------------------------------------
// Policies

/// Parses a policy from `len` bytes of TOML at `text`. `name` (NUL-terminated, may be NULL)
/// names the source in error messages ("name:line:col: message"). On success stores a new
/// policy in `*out`.
#[no_mangle]
pub unsafe extern "C" fn weir_policy_parse(
    text: *const u8,
    len: usize,
    name: *const c_char,
    out: *mut *mut weir_policy,
    err: *mut *mut weir_error,
) -> c_int {
    guard(|| {
        if out.is_null() {
            return fail(err, WEIR_ERR_NULL, "out is NULL");
        }
        *out = ptr::null_mut();
        let src = match bytes(text, len) {
            Ok(b) => b,
            Err(code) => return fail(err, code, "policy text is NULL or too long"),
        };
        let name = if name.is_null() {
            None
        } else {
            CStr::from_ptr(name).to_str().ok()
        };
        let src = match weir::policy::config::policy_text(src, name) {
            Ok(s) => s,
            Err(e) => return fail(err, WEIR_ERR_POLICY, e),
        };
        match CompiledPolicy::parse(src, name) {
            Ok(policy) => give(out, weir_policy { policy }),
            Err(e) => fail(err, WEIR_ERR_POLICY, e),
        }
    })
}

/// Reads and parses a policy file (NUL-terminated path).
#[no_mangle]
pub unsafe extern "C" fn weir_policy_load(
    path: *const c_char,
    out: *mut *mut weir_policy,
    err: *mut *mut weir_error,
) -> c_int {
    guard(|| {
        if path.is_null() || out.is_null() {
            return fail(err, WEIR_ERR_NULL, "path or out is NULL");
        }
        *out = ptr::null_mut();
        let Ok(p) = CStr::from_ptr(path).to_str() else {
            return fail(err, WEIR_ERR_INVALID, "path is not valid UTF-8");
        };
        let text = match std::fs::read(p) {
            Ok(t) => t,
            Err(e) => return fail(err, WEIR_ERR_IO, format_args!("{p}: {e}")),
        };
        weir_policy_parse(text.as_ptr(), text.len(), path, out, err)
    })
}

/// Frees a policy (NULL is ignored). Engines made from it stay valid.
#[no_mangle]
pub unsafe extern "C" fn weir_policy_free(p: *mut weir_policy) {
    take_back(p)
}

/// Number of zones the policy declares (0 for NULL).
#[no_mangle]
pub unsafe extern "C" fn weir_policy_zone_count(p: *const weir_policy) -> usize {
    if p.is_null() {
        return 0;
    }
    (*p).policy.zones.len()
}

/// Describes zone `i` of the policy.
#[no_mangle]
pub unsafe extern "C" fn weir_policy_zone(
    p: *const weir_policy,
    i: usize,
    out: *mut weir_zone_info,
) -> c_int {
    guard(|| {
        if p.is_null() || out.is_null() {
            return WEIR_ERR_NULL;
        }
        let policy = &(*p).policy;
        let Some(z) = policy.zones.get(i) else {
            return WEIR_ERR_INVALID;
        };
        let layout = &Engine::layouts(policy)[i];
        *out = weir_zone_info {
            name: z.name.as_ptr(),
            name_len: z.name.len(),
            bytes: layout.bytes,
            schema: layout.schema,
            cluster_bytes: layout.cluster_bytes,
        };
        WEIR_OK
    })
}

// ---------------------------------------------------------------------------------------------
// Engines

/// An engine with its zones in this process's memory.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_new(
    p: *const weir_policy,
    out: *mut *mut weir_engine,
    err: *mut *mut weir_error,
) -> c_int {
    guard(|| {
        if p.is_null() || out.is_null() {
            return fail(err, WEIR_ERR_NULL, "policy or out is NULL");
        }
        *out = ptr::null_mut();
        match Engine::new((*p).policy.clone()) {
            Ok(engine) => give(out, weir_engine { engine }),
            Err(e) => fail(err, WEIR_ERR_ZONE, e),
        }
    })
}

/// Bytes of the shared counter block `weir_engine_attach` can take for this policy (0 for NULL).
#[no_mangle]
pub unsafe extern "C" fn weir_policy_counters_bytes(p: *const weir_policy) -> usize {
    if p.is_null() {
        return 0;
    }
    Engine::counters_layout(&(*p).policy).0
}

/// An engine over caller-provided regions, one per zone in `weir_policy_zone` order, each at
/// least that zone's `bytes` long and 64-byte aligned. A region that already holds the zone
/// (an nginx reload) keeps its state; one created for another layout is refused.
/// `counters` (may be NULL: counters then live in this process) is a region of at least
/// `weir_policy_counters_bytes` bytes, 8-byte aligned, shared by every process that attaches,
/// so that all of them add to and report the same counters; it keeps its counts while the
/// policy's limits stay the same and starts from zero otherwise. Attach it first in one process
/// (nginx: the master's zone init) before others use it.
/// `clock_base` is recorded in newly created zones (pass 0 to use CLOCK_MONOTONIC as is).
/// The regions must outlive the engine.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_attach(
    p: *const weir_policy,
    regions: *const weir_region,
    n: usize,
    counters: *const weir_region,
    clock_base: u64,
    out: *mut *mut weir_engine,
    err: *mut *mut weir_error,
) -> c_int {
    weir_engine_attach_shared(
        p,
        regions,
        n,
        ptr::null(),
        counters,
        clock_base,
        0,
        out,
        err,
    )
}

/// `weir_engine_attach_shared` flag: do not start the cluster syncer threads yet (call
/// `weir_engine_start_sync` later, e.g. in each process after `fork`: threads do not survive
/// it).
pub const WEIR_ATTACH_DEFER_SYNC: u32 = 1;

/// `weir_engine_attach_shared` flag: every zone and cluster region that holds no table yet is
/// all zero bytes (fresh shared memory, as an nginx zone or an anonymous `mmap`). Only the
/// headers are written then, so a zone's pages are first touched when keys land in them and a
/// large zone costs no memory up front.
pub const WEIR_ATTACH_ZEROED: u32 = 2;

/// Like `weir_engine_attach`, for processes sharing the zones (nginx workers): `cluster` (may
/// be NULL when the policy has no `scope = "cluster"` zone, or to keep cluster state in this
/// process) holds `n` regions in zone order; for each cluster zone one of at least its
/// `cluster_bytes` (64-byte aligned, outliving the engine, formatted by the first attach as
/// `regions` are: attach it first in one process), for local zones `{NULL, 0}`. Every process
/// attached to the same cluster regions decides with the same view of the other nodes' counts
/// and sync health, and any of them can take over the syncing. `flags`: 0 or any of
/// `WEIR_ATTACH_DEFER_SYNC`, `WEIR_ATTACH_ZEROED`.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_attach_shared(
    p: *const weir_policy,
    regions: *const weir_region,
    n: usize,
    cluster: *const weir_region,
    counters: *const weir_region,
    clock_base: u64,
    flags: u32,
    out: *mut *mut weir_engine,
    err: *mut *mut weir_error,
) -> c_int {
    guard(|| {
        if p.is_null() || out.is_null() || (regions.is_null() && n > 0) {
            return fail(err, WEIR_ERR_NULL, "policy, regions or out is NULL");
        }
        *out = ptr::null_mut();
        let policy = &(*p).policy;
        let layouts = Engine::layouts(policy);
        if n != layouts.len() {
            return fail(
                err,
                WEIR_ERR_INVALID,
                format_args!("{n} regions for {} zones", layouts.len()),
            );
        }
        let regions = if n == 0 {
            &[][..]
        } else {
            std::slice::from_raw_parts(regions, n)
        };
        let mut tables = Vec::with_capacity(n);
        for (r, l) in regions.iter().zip(&layouts) {
            if r.ptr.is_null() {
                return fail(
                    err,
                    WEIR_ERR_NULL,
                    format_args!("zone {}: region is NULL", l.name),
                );
            }
            if r.len < l.bytes {
                return fail(
                    err,
                    WEIR_ERR_ZONE,
                    format_args!(
                        "zone {}: region of {} bytes, needs {}",
                        l.name, r.len, l.bytes
                    ),
                );
            }
            let (ptr, bytes) = (r.ptr.cast(), l.bytes);
            let made = if flags & WEIR_ATTACH_ZEROED != 0 {
                Table::create_or_attach_zeroed(ptr, bytes, l.schema, clock_base)
            } else {
                Table::create_or_attach(ptr, bytes, l.schema, clock_base)
            };
            match made {
                Ok((t, _)) => tables.push(t),
                Err(e) => return fail(err, WEIR_ERR_ZONE, format_args!("zone {}: {e}", l.name)),
            }
        }
        let mut shared = Vec::with_capacity(n);
        for (i, (l, t)) in layouts.iter().zip(&tables).enumerate() {
            let r = if cluster.is_null() {
                None
            } else {
                Some(&*cluster.add(i))
            };
            match r {
                Some(r) if l.cluster_bytes > 0 && !r.ptr.is_null() => {
                    match ClusterShared::create_or_attach(
                        r.ptr.cast(),
                        r.len,
                        t.capacity(),
                        l.schema,
                        flags & WEIR_ATTACH_ZEROED != 0,
                    ) {
                        Ok((s, _)) => shared.push(Some(s)),
                        Err(e) => {
                            return fail(err, WEIR_ERR_ZONE, format_args!("zone {}: {e}", l.name))
                        }
                    }
                }
                Some(r) if l.cluster_bytes > 0 || !r.ptr.is_null() => {
                    return fail(
                        err,
                        WEIR_ERR_INVALID,
                        format_args!(
                            "zone {}: a cluster region is needed for cluster zones only",
                            l.name
                        ),
                    )
                }
                _ => shared.push(None),
            }
        }
        let start = flags & WEIR_ATTACH_DEFER_SYNC == 0;
        let block = if counters.is_null() {
            Counters::new(policy.limits.len())
        } else {
            let (_, fp) = Engine::counters_layout(policy);
            let c = &*counters;
            match Counters::attach(c.ptr.cast(), c.len, policy.limits.len(), fp) {
                Ok(block) => block,
                Err(e) => return fail(err, WEIR_ERR_ZONE, format_args!("counters: {e}")),
            }
        };
        let made = Engine::with_shared(policy.clone(), tables, shared, block, start);
        match made {
            Ok(engine) => give(out, weir_engine { engine }),
            Err(e) => fail(err, WEIR_ERR_ZONE, e),
        }
    })
}

/// Starts the engine's cluster syncer threads that are not running (see
/// `WEIR_ATTACH_DEFER_SYNC`); WEIR_OK when the policy has no cluster zone.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_start_sync(
    e: *const weir_engine,
    err: *mut *mut weir_error,
) -> c_int {
    guard(|| {
        if e.is_null() {
            return fail(err, WEIR_ERR_NULL, "engine is NULL");
        }
        match (*e).engine.start_syncers() {
            Ok(()) => WEIR_OK,
            Err(m) => fail(err, WEIR_ERR_ZONE, m),
        }
    })
}

/// Stops the engine's cluster syncers and waits for them (at most one Redis I/O timeout,
/// ≤ 2 s); a leading syncer resigns so that another process takes over at once. Also done by
/// `weir_engine_free`. NULL is ignored.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_stop_sync(e: *const weir_engine) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if let Some(e) = e.as_ref() {
            e.engine.stop_syncers();
        }
    }));
}

// ---------------------------------------------------------------------------------------------
// Cluster log

/// Messages of the cluster syncers (sync failed / resumed) queued for the host, at most this
/// many; older ones are dropped when the host does not drain them.
const LOG_QUEUE: usize = 64;

static LOG: std::sync::Mutex<std::collections::VecDeque<String>> =
    std::sync::Mutex::new(std::collections::VecDeque::new());

fn queue_log(msg: &str) {
    let mut q = LOG.lock().unwrap_or_else(|e| e.into_inner());
    if q.len() == LOG_QUEUE {
        q.pop_front();
    }
    q.push_back(msg.to_owned());
}

/// Queues the cluster syncers' messages (which come from their threads) for
/// `weir_cluster_log_pop` instead of writing them to standard error: for hosts whose logger
/// must not be called from a foreign thread (nginx). At most 64 are kept; older ones are
/// dropped. Call before the syncers start.
#[no_mangle]
pub extern "C" fn weir_cluster_log_queue() {
    weir::cluster::set_log_hook(queue_log);
}

/// Takes the oldest queued cluster message: copies at most `cap` bytes of it into `buf` (not
/// NUL-terminated; a longer message is cut) and returns the number of bytes copied, 0 when
/// the queue is empty (or `buf` is NULL or `cap` 0). Call it from the host's own thread.
#[no_mangle]
pub unsafe extern "C" fn weir_cluster_log_pop(buf: *mut u8, cap: usize) -> usize {
    if buf.is_null() || cap == 0 {
        return 0;
    }
    catch_unwind(AssertUnwindSafe(|| {
        let Some(m) = LOG.lock().unwrap_or_else(|e| e.into_inner()).pop_front() else {
            return 0;
        };
        let n = m.len().min(cap);
        ptr::copy_nonoverlapping(m.as_ptr(), buf, n);
        n
    }))
    .unwrap_or(0)
}

/// Frees an engine (NULL is ignored). Caller regions are left as they are.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_free(e: *mut weir_engine) {
    take_back(e)
}

/// A `weir_request` seen as the engine's request view.
struct CRequest<'a> {
    method: &'a [u8],
    target: &'a [u8],
    peer: Option<IpAddr>,
    header: weir_header_fn,
    ctx: *mut c_void,
}

impl RequestView for CRequest<'_> {
    fn method(&self) -> &[u8] {
        self.method
    }
    fn target(&self) -> &[u8] {
        self.target
    }
    fn peer(&self) -> Option<IpAddr> {
        self.peer
    }
    fn header_nth(&self, name: &[u8], nth: usize) -> Option<&[u8]> {
        let f = self.header?;
        let (mut v, mut len) = (ptr::null::<u8>(), 0usize);
        // SAFETY: the callback's contract (weir.h): it writes a pointer valid until the
        // evaluating call returns, which outlives this borrow.
        unsafe {
            if f(self.ctx, name.as_ptr(), name.len(), nth, &mut v, &mut len) != 1 {
                return None;
            }
            bytes(v, len).ok()
        }
    }
}

unsafe fn request<'a>(r: *const weir_request) -> Result<CRequest<'a>, c_int> {
    if r.is_null() {
        return Err(WEIR_ERR_NULL);
    }
    let r = &*r;
    let peer = match bytes(r.peer, r.peer_len)? {
        p if p.is_empty() || p.starts_with(b"unix:") => None,
        p => Some(
            std::str::from_utf8(p)
                .ok()
                .and_then(|s| s.parse::<IpAddr>().ok())
                .ok_or(WEIR_ERR_INVALID)?,
        ),
    };
    Ok(CRequest {
        method: bytes(r.method, r.method_len)?,
        target: bytes(r.target, r.target_len)?,
        peer,
        header: r.header,
        ctx: r.header_ctx,
    })
}

fn empty_verdict() -> weir_verdict {
    weir_verdict {
        action: WEIR_PASS,
        status: 200,
        unmatched: 0,
        wait_ns: 0,
        retry_after_s: 0,
        limit: -1,
        exempt: -1,
        dry_run_limit: -1,
        dry_run_action: -1,
        headers_len: 0,
        headers_truncated: 0,
        permits: [NO_PERMIT; WEIR_MAX_PERMITS],
        ticket: NO_PERMIT,
    }
}

fn action_code(a: Action) -> i32 {
    match a {
        Action::Pass => WEIR_PASS,
        Action::Delay => WEIR_DELAY,
        Action::Reject => WEIR_REJECT,
        Action::Queue => WEIR_QUEUE,
    }
}

fn raw_permit(r: Option<RawPermit>) -> weir_permit {
    r.map_or(NO_PERMIT, |r| weir_permit {
        limit: i32::from(r.limit),
        key_hash: r.key_hash,
        bucket: r.bucket,
        generation: r.generation,
    })
}

/// The permit `p` holds: `Ok(None)` when empty, `Err` when its limit is no concurrency limit
/// of `e` (forged or from another engine).
fn held(e: &Engine, p: &weir_permit) -> Result<Option<RawPermit>, c_int> {
    if p.limit < 0 {
        return Ok(None);
    }
    match u16::try_from(p.limit) {
        Ok(limit) if e.is_concurrency_limit(limit.into()) => Ok(Some(RawPermit {
            limit,
            key_hash: p.key_hash,
            bucket: p.bucket,
            generation: p.generation,
        })),
        _ => Err(WEIR_ERR_INVALID),
    }
}

/// Takes the permits out of `v` (emptying them); `Err` and nothing taken when one is forged.
fn take_permits(e: &Engine, v: &mut weir_verdict) -> Result<Permits, c_int> {
    let mut raw = [None; MAX_PERMITS];
    for (slot, p) in raw.iter_mut().zip(&v.permits) {
        *slot = held(e, p)?;
    }
    v.permits = [NO_PERMIT; WEIR_MAX_PERMITS];
    Ok(Permits::from_raw(raw))
}

/// Takes the ticket out of `v` (emptying it); `Err` and nothing taken when it is forged.
fn take_ticket(e: &Engine, v: &mut weir_verdict) -> Result<Option<QueueTicket>, c_int> {
    let t = held(e, &v.ticket)?;
    v.ticket = NO_PERMIT;
    Ok(t.map(QueueTicket::from_raw))
}

unsafe fn evaluate(
    e: *const weir_engine,
    r: *const weir_request,
    now: u64,
    ticket: Option<QueueTicket>,
    out: *mut weir_verdict,
    header_buf: *mut u8,
    header_cap: usize,
) -> c_int {
    if e.is_null() || out.is_null() {
        return WEIR_ERR_NULL;
    }
    if header_buf.is_null() && header_cap > 0 {
        return WEIR_ERR_NULL;
    }
    let engine = &(*e).engine;
    let req = match request(r) {
        Ok(r) => r,
        Err(code) => {
            if let Some(t) = ticket {
                engine.abandon(t, now);
            }
            return code;
        }
    };
    let outcome = match ticket {
        Some(t) => engine.evaluate_queued(&req, now, t),
        None => engine.evaluate(&req, now),
    };
    let o = match outcome {
        Ok(o) => o,
        Err(_) => {
            *out = empty_verdict();
            (*out).action = WEIR_REJECT;
            (*out).status = 400;
            return WEIR_ERR_BAD_TARGET;
        }
    };
    let mut v = empty_verdict();
    v.action = action_code(o.action);
    v.status = o.status;
    v.unmatched = o.unmatched as u8;
    v.wait_ns = o.wait_ns;
    v.retry_after_s = if o.action == Action::Reject {
        o.retry_after_s()
    } else {
        0
    };
    v.limit = o.limit.map_or(-1, i32::from);
    v.exempt = o.exempt.map_or(-1, i32::from);
    if let Some((l, a)) = o.dry_run {
        v.dry_run_limit = l as i32;
        v.dry_run_action = action_code(a);
    }
    // Header lines into the caller's buffer.
    let buf: &mut [u8] = if header_cap == 0 {
        &mut []
    } else {
        std::slice::from_raw_parts_mut(header_buf, header_cap.min(MAX_LEN))
    };
    let mut used = 0;
    engine.headers(&o, |name, value| {
        let line_len = name.len() + 2 + value.len() + 2;
        if used + line_len > buf.len() {
            v.headers_truncated = 1;
            return;
        }
        for part in [name.as_bytes(), b": ", value.as_bytes(), b"\r\n"] {
            buf[used..used + part.len()].copy_from_slice(part);
            used += part.len();
        }
    });
    v.headers_len = used;
    for (slot, raw) in v.permits.iter_mut().zip(o.permits.into_raw()) {
        *slot = raw_permit(raw);
    }
    v.ticket = raw_permit(o.ticket.map(QueueTicket::into_raw));
    *out = v;
    WEIR_OK
}

/// Evaluates a request at `now` (CLOCK_MONOTONIC ns). Fills `*out`; response header lines
/// ("Retry-After: 3\r\n", and RateLimit fields when the policy enables them) are written to
/// `header_buf` (may be NULL when `header_cap` is 0). A target nginx would answer 400, or more
/// than WEIR_MAX_HEADER_VALUES values of one header the policy reads, gives
/// WEIR_ERR_BAD_TARGET with `out->action = WEIR_REJECT, out->status = 400`.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_evaluate(
    e: *const weir_engine,
    r: *const weir_request,
    now: u64,
    out: *mut weir_verdict,
    header_buf: *mut u8,
    header_cap: usize,
) -> c_int {
    guard(|| evaluate(e, r, now, None, out, header_buf, header_cap))
}

/// Evaluates a queued request again: `v` is the WEIR_QUEUE verdict (its ticket is consumed)
/// and is overwritten with the new verdict, which holds a ticket again only if still queued.
/// A ticket already handed back (a stale copy) holds no place: the request is evaluated anew.
/// A ticket naming no concurrency limit of `e` gives WEIR_ERR_INVALID and changes nothing.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_evaluate_queued(
    e: *const weir_engine,
    r: *const weir_request,
    now: u64,
    v: *mut weir_verdict,
    header_buf: *mut u8,
    header_cap: usize,
) -> c_int {
    guard(|| {
        if e.is_null() || v.is_null() {
            return WEIR_ERR_NULL;
        }
        match take_ticket(&(*e).engine, &mut *v) {
            Ok(ticket) => evaluate(e, r, now, ticket, v, header_buf, header_cap),
            Err(code) => code,
        }
    })
}

/// Gives up the queue place held in `v` (the wait timed out or the client left). Idempotent,
/// also across copies of `v`. A ticket naming no concurrency limit of `e` gives
/// WEIR_ERR_INVALID and changes nothing.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_abandon(
    e: *const weir_engine,
    v: *mut weir_verdict,
    now: u64,
) -> c_int {
    guard(|| {
        if e.is_null() || v.is_null() {
            return WEIR_ERR_NULL;
        }
        match take_ticket(&(*e).engine, &mut *v) {
            Ok(t) => {
                if let Some(t) = t {
                    (*e).engine.abandon(t, now);
                }
                WEIR_OK
            }
            Err(code) => code,
        }
    })
}

/// Releases the concurrency permits held in `v` (when the response is complete) and clears
/// them, so a second call changes nothing; releasing a copy of `v` afterwards changes nothing
/// either. A permit naming no concurrency limit of `e` gives WEIR_ERR_INVALID and nothing is
/// released.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_release(
    e: *const weir_engine,
    v: *mut weir_verdict,
    now: u64,
) -> c_int {
    guard(|| {
        if e.is_null() || v.is_null() {
            return WEIR_ERR_NULL;
        }
        match take_permits(&(*e).engine, &mut *v) {
            Ok(permits) => {
                (*e).engine.release(permits, now);
                WEIR_OK
            }
            Err(code) => code,
        }
    })
}

/// 1 when the policy says `failure_mode = "closed"` (reject when weir cannot decide, e.g. on
/// WEIR_ERR_PANIC), 0 for "open" (the default) or NULL.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_fails_closed(e: *const weir_engine) -> c_int {
    if e.is_null() {
        return 0;
    }
    ((*e).engine.policy().failure_mode == weir::policy::config::FailureMode::Closed) as c_int
}

/// Number of limits in the engine's policy (0 for NULL).
#[no_mangle]
pub unsafe extern "C" fn weir_engine_limit_count(e: *const weir_engine) -> usize {
    if e.is_null() {
        return 0;
    }
    (*e).engine.policy().limits.len()
}

/// The name of limit `i` (not NUL-terminated, valid as long as the engine).
#[no_mangle]
pub unsafe extern "C" fn weir_engine_limit_name(
    e: *const weir_engine,
    i: usize,
    name: *mut *const u8,
    len: *mut usize,
) -> c_int {
    engine_name(e, name, len, |e| {
        e.policy().limits.get(i).map(|l| l.name.as_bytes())
    })
}

/// Writes the name `pick` finds in engine `e` to `*name`/`*len` (it lives as long as the
/// engine): `WEIR_ERR_NULL` for a NULL argument, `WEIR_ERR_INVALID` when `pick` finds none.
unsafe fn engine_name(
    e: *const weir_engine,
    name: *mut *const u8,
    len: *mut usize,
    pick: impl FnOnce(&Engine) -> Option<&[u8]>,
) -> c_int {
    guard(|| {
        if e.is_null() || name.is_null() || len.is_null() {
            return WEIR_ERR_NULL;
        }
        let Some(n) = pick(&(*e).engine) else {
            return WEIR_ERR_INVALID;
        };
        *name = n.as_ptr();
        *len = n.len();
        WEIR_OK
    })
}

/// Number of headers the engine's policy reads (0 for NULL); see `weir_engine_header_name`.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_header_count(e: *const weir_engine) -> usize {
    if e.is_null() {
        return 0;
    }
    (*e).engine.header_names().len()
}

/// The lowercase name of header `i` the policy reads (not NUL-terminated, valid as long as the
/// engine); `cookie` when it reads cookies. The engine's header callback is asked for no other
/// name, so a host that copies request headers for it may copy only these.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_header_name(
    e: *const weir_engine,
    i: usize,
    name: *mut *const u8,
    len: *mut usize,
) -> c_int {
    engine_name(e, name, len, |e| e.header_names().nth(i))
}

/// Per-limit counters.
#[repr(C)]
pub struct weir_limit_counters {
    pub passed: u64,
    pub delayed: u64,
    pub rejected: u64,
    pub queued: u64,
    pub dry_run_delayed: u64,
    pub dry_run_rejected: u64,
}

/// How long a request queued by limit `i` waits (its `timeout`) in nanoseconds, in `*out_ns`;
/// 0 for limits without a queue. Hosts use it to bound their wait on a WEIR_QUEUE verdict.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_limit_queue_timeout(
    e: *const weir_engine,
    i: usize,
    out_ns: *mut u64,
) -> c_int {
    guard(|| {
        if e.is_null() || out_ns.is_null() {
            return WEIR_ERR_NULL;
        }
        let limits = &(*e).engine.policy().limits;
        let Some(l) = limits.get(i) else {
            return WEIR_ERR_INVALID;
        };
        *out_ns = if l.queue == 0 {
            0
        } else {
            u64::try_from(l.timeout.as_nanos()).unwrap_or(u64::MAX)
        };
        WEIR_OK
    })
}

/// The log level limit `i` asks for its rejections (delays are logged one level lower):
/// 0 info, 1 notice, 2 warn, 3 error (the default); -1 for NULL or an index out of range.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_limit_log_level(e: *const weir_engine, i: usize) -> c_int {
    use weir::policy::config::LogLevel;
    if e.is_null() {
        return -1;
    }
    match (*e).engine.policy().limits.get(i).map(|l| l.log_level) {
        Some(LogLevel::Info) => 0,
        Some(LogLevel::Notice) => 1,
        Some(LogLevel::Warn) => 2,
        Some(LogLevel::Error) => 3,
        None => -1,
    }
}

/// A snapshot of limit `i`'s counters.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_limit_counters(
    e: *const weir_engine,
    i: usize,
    out: *mut weir_limit_counters,
) -> c_int {
    guard(|| {
        if e.is_null() || out.is_null() {
            return WEIR_ERR_NULL;
        }
        let engine = &(*e).engine;
        if i >= engine.policy().limits.len() {
            return WEIR_ERR_INVALID;
        }
        let c = engine.counters(i);
        *out = weir_limit_counters {
            passed: c.passed,
            delayed: c.delayed,
            rejected: c.rejected,
            queued: c.queued,
            dry_run_delayed: c.dry_run_delayed,
            dry_run_rejected: c.dry_run_rejected,
        };
        WEIR_OK
    })
}

/// Renders every counter as Prometheus text into `buf`. `*written` receives the length; when
/// `cap` is too small, WEIR_ERR_BUFFER_TOO_SMALL is returned, nothing is written and
/// `*written` is the size needed.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_prometheus(
    e: *const weir_engine,
    buf: *mut u8,
    cap: usize,
    written: *mut usize,
) -> c_int {
    guard(|| {
        if e.is_null() || written.is_null() || (buf.is_null() && cap > 0) {
            return WEIR_ERR_NULL;
        }
        let mut text = String::new();
        let _ = (*e).engine.render_prometheus(&mut text);
        *written = text.len();
        if text.len() > cap {
            return WEIR_ERR_BUFFER_TOO_SMALL;
        }
        ptr::copy_nonoverlapping(text.as_ptr(), buf, text.len());
        WEIR_OK
    })
}

/// A zone outside the policy (nginx's `weir_req_zone`) for weir_prometheus, and the name its
/// samples carry (`zone="…"`). A NULL `zone` is skipped.
#[repr(C)]
pub struct weir_named_zone {
    pub zone: *const weir_zone,
    pub name: *const u8,
    pub name_len: usize,
}

/// Renders the counters of engine `e` (may be NULL) and of `zones[0..n]` as one Prometheus
/// text, each metric family once (one HELP and one TYPE line, all its samples under them):
/// the zones join the policy's zones in the `weir_zone_*` families. Buffer protocol as
/// weir_engine_prometheus.
#[no_mangle]
pub unsafe extern "C" fn weir_prometheus(
    e: *const weir_engine,
    zones: *const weir_named_zone,
    n: usize,
    buf: *mut u8,
    cap: usize,
    written: *mut usize,
) -> c_int {
    guard(|| {
        if written.is_null() || (buf.is_null() && cap > 0) || (zones.is_null() && n > 0) {
            return WEIR_ERR_NULL;
        }
        let named: &[weir_named_zone] = if n == 0 {
            &[]
        } else {
            // SAFETY: the caller passes n readable entries (checked non-NULL above).
            std::slice::from_raw_parts(zones, n)
        };
        let mut stats = Vec::with_capacity(n);
        for z in named.iter().filter(|z| !z.zone.is_null()) {
            let name = match bytes(z.name, z.name_len) {
                Ok(b) => String::from_utf8_lossy(b),
                Err(rc) => return rc,
            };
            // SAFETY: a non-NULL zone is a live handle from weir_zone_new / weir_zone_attach.
            stats.push((name, (*z.zone).table.stats()));
        }
        let stats: Vec<(&str, _)> = stats.iter().map(|(n, s)| (n.as_ref(), *s)).collect();
        let mut text = String::new();
        let engine = e.as_ref().map(|e| &e.engine);
        let _ = weir::policy::metrics::render_prometheus(engine, &stats, &mut text);
        *written = text.len();
        if text.len() > cap {
            return WEIR_ERR_BUFFER_TOO_SMALL;
        }
        if !text.is_empty() {
            // SAFETY: buf holds cap >= text.len() > 0 bytes, so it is not NULL.
            ptr::copy_nonoverlapping(text.as_ptr(), buf, text.len());
        }
        WEIR_OK
    })
}

// ---------------------------------------------------------------------------------------------
// Zones and limiters (the low level that nginx-style directives use)

/// Bytes a zone needs at least.
#[no_mangle]
pub extern "C" fn weir_zone_min_bytes() -> usize {
    Table::bytes_for(weir::table::MIN_CAPACITY)
}

/// A zone of `bytes` in this process's memory.
#[no_mangle]
pub unsafe extern "C" fn weir_zone_new(
    bytes: usize,
    schema: u64,
    out: *mut *mut weir_zone,
    err: *mut *mut weir_error,
) -> c_int {
    guard(|| {
        if out.is_null() {
            return fail(err, WEIR_ERR_NULL, "out is NULL");
        }
        *out = ptr::null_mut();
        match Table::new(bytes, schema, 0) {
            Ok(table) => give(out, weir_zone::new(table)),
            Err(e) => fail(err, WEIR_ERR_ZONE, e),
        }
    })
}

/// Creates a zone in the caller's region, or attaches to the one already there (keeping its
/// state) when it has the same size and schema; `*existed` (may be NULL) tells which. The region
/// must be 64-byte aligned and outlive the handle; share it between processes to share limits.
#[no_mangle]
pub unsafe extern "C" fn weir_zone_attach(
    region: *mut c_void,
    len: usize,
    schema: u64,
    clock_base: u64,
    existed: *mut c_int,
    out: *mut *mut weir_zone,
    err: *mut *mut weir_error,
) -> c_int {
    zone_attach(region, len, schema, clock_base, false, existed, out, err)
}

/// As `weir_zone_attach`, for a region that holds only zero bytes when it holds no zone (fresh
/// shared memory: an nginx zone, an anonymous `mmap`): a new zone writes only its header, so its
/// pages are first touched when keys land in them.
#[no_mangle]
pub unsafe extern "C" fn weir_zone_attach_zeroed(
    region: *mut c_void,
    len: usize,
    schema: u64,
    clock_base: u64,
    existed: *mut c_int,
    out: *mut *mut weir_zone,
    err: *mut *mut weir_error,
) -> c_int {
    zone_attach(region, len, schema, clock_base, true, existed, out, err)
}

#[allow(clippy::too_many_arguments)]
unsafe fn zone_attach(
    region: *mut c_void,
    len: usize,
    schema: u64,
    clock_base: u64,
    zeroed: bool,
    existed: *mut c_int,
    out: *mut *mut weir_zone,
    err: *mut *mut weir_error,
) -> c_int {
    guard(|| {
        if out.is_null() || region.is_null() {
            return fail(err, WEIR_ERR_NULL, "region or out is NULL");
        }
        *out = ptr::null_mut();
        let made = if zeroed {
            Table::create_or_attach_zeroed(region.cast(), len, schema, clock_base)
        } else {
            Table::create_or_attach(region.cast(), len, schema, clock_base)
        };
        match made {
            Ok((table, kept)) => {
                if !existed.is_null() {
                    *existed = kept as c_int;
                }
                give(out, weir_zone::new(table))
            }
            Err(e) => fail(err, WEIR_ERR_ZONE, e),
        }
    })
}

/// Frees a zone handle (NULL is ignored); a caller's region is left as it is.
#[no_mangle]
pub unsafe extern "C" fn weir_zone_free(z: *mut weir_zone) {
    take_back(z)
}

/// A zone's counters.
#[no_mangle]
pub unsafe extern "C" fn weir_zone_get_stats(
    z: *const weir_zone,
    out: *mut weir_zone_stats,
) -> c_int {
    guard(|| {
        if z.is_null() || out.is_null() {
            return WEIR_ERR_NULL;
        }
        *out = (*z).table.stats().into();
        WEIR_OK
    })
}

unsafe fn new_limiter(
    made: Result<LimiterKind, weir::limiter::ParamError>,
    out: *mut *mut weir_limiter,
    err: *mut *mut weir_error,
) -> c_int {
    if out.is_null() {
        return fail(err, WEIR_ERR_NULL, "out is NULL");
    }
    *out = ptr::null_mut();
    match made {
        Ok(kind) => give(out, weir_limiter { kind }),
        Err(e) => fail(err, WEIR_ERR_INVALID, e),
    }
}

/// GCRA (nginx limit_req): `count` requests per `period_ns`, `burst`, and `delay`: -1 for
/// nodelay, 0 for nginx's default (every excess request waits), N for `delay=N`.
#[no_mangle]
pub unsafe extern "C" fn weir_limiter_gcra(
    count: u64,
    period_ns: u64,
    burst: u64,
    delay: i64,
    out: *mut *mut weir_limiter,
    err: *mut *mut weir_error,
) -> c_int {
    guard(|| {
        let mode = match delay {
            d if d < 0 => Delay::NoDelay,
            0 => Delay::Delay,
            d => Delay::After(d as u64),
        };
        let made = Gcra::new(Rate { count, period_ns }, burst, mode).map(LimiterKind::Gcra);
        new_limiter(made, out, err)
    })
}

/// Sliding window: `events` per `window_ns`.
#[no_mangle]
pub unsafe extern "C" fn weir_limiter_sliding(
    events: u64,
    window_ns: u64,
    out: *mut *mut weir_limiter,
    err: *mut *mut weir_error,
) -> c_int {
    guard(|| {
        new_limiter(
            SlidingWindow::new(events, window_ns).map(LimiterKind::Sliding),
            out,
            err,
        )
    })
}

/// Concurrency: at most `max` in flight per key; permits are leases of `lease_ns` (0 = the
/// default, 120 s) so that permits of a process that died come back by themselves.
#[no_mangle]
pub unsafe extern "C" fn weir_limiter_concurrency(
    max: u64,
    lease_ns: u64,
    out: *mut *mut weir_limiter,
    err: *mut *mut weir_error,
) -> c_int {
    guard(|| {
        let lease = if lease_ns == 0 {
            weir::limiter::concurrency::DEFAULT_LEASE_NS
        } else {
            lease_ns
        };
        new_limiter(
            Concurrency::new(max, lease).map(LimiterKind::Concurrency),
            out,
            err,
        )
    })
}

/// Frees a limiter (NULL is ignored).
#[no_mangle]
pub unsafe extern "C" fn weir_limiter_free(l: *mut weir_limiter) {
    take_back(l)
}

fn check_out(d: Decision, v: &weir::limiter::Verdict) -> weir_check {
    weir_check {
        action: match d {
            Decision::Pass => WEIR_PASS,
            Decision::Delay => WEIR_DELAY,
            Decision::Reject => WEIR_REJECT,
        },
        wait_ns: v.wait_ns,
        retry_after_ns: v.retry_after_ns,
        limit: v.limit,
        remaining: v.remaining.get(),
        reset_ns: v.reset_ns,
    }
}

/// Checks and charges `cost` for `key` in a rate zone (GCRA or sliding limiter) at `now`.
#[no_mangle]
pub unsafe extern "C" fn weir_zone_check(
    z: *const weir_zone,
    l: *const weir_limiter,
    key: *const u8,
    key_len: usize,
    cost: u64,
    now: u64,
    out: *mut weir_check,
) -> c_int {
    guard(|| {
        if z.is_null() || l.is_null() || out.is_null() {
            return WEIR_ERR_NULL;
        }
        let key = match bytes(key, key_len) {
            Ok(k) => k,
            Err(code) => return code,
        };
        let t = &(*z).table;
        let h = t.key_hash(key);
        let v = match &(*l).kind {
            LimiterKind::Gcra(g) => t.check(g, h, cost, now),
            LimiterKind::Sliding(s) => t.check(s, h, cost, now),
            LimiterKind::Concurrency(_) => return WEIR_ERR_INVALID,
        };
        *out = check_out(v.decision, &v);
        WEIR_OK
    })
}

/// Takes back a charge `weir_zone_check` made at `now` (when a later limit rejected the
/// request: all-or-nothing across limits).
#[no_mangle]
pub unsafe extern "C" fn weir_zone_refund(
    z: *const weir_zone,
    l: *const weir_limiter,
    key: *const u8,
    key_len: usize,
    cost: u64,
    now: u64,
) -> c_int {
    guard(|| {
        if z.is_null() || l.is_null() {
            return WEIR_ERR_NULL;
        }
        let key = match bytes(key, key_len) {
            Ok(k) => k,
            Err(code) => return code,
        };
        let t = &(*z).table;
        let h = t.key_hash(key);
        match &(*l).kind {
            LimiterKind::Gcra(g) => t.refund(g, h, cost, now),
            LimiterKind::Sliding(s) => t.refund(s, h, cost, now),
            LimiterKind::Concurrency(_) => return WEIR_ERR_INVALID,
        }
        WEIR_OK
    })
}

/// Takes a concurrency permit for `key`. When admitted, `*permit` holds it (release it once
/// with `weir_zone_release`); when refused, `*permit` is empty (`limit == -1`).
#[no_mangle]
pub unsafe extern "C" fn weir_zone_acquire(
    z: *const weir_zone,
    l: *const weir_limiter,
    key: *const u8,
    key_len: usize,
    now: u64,
    out: *mut weir_check,
    permit: *mut weir_permit,
) -> c_int {
    guard(|| {
        if z.is_null() || l.is_null() || out.is_null() || permit.is_null() {
            return WEIR_ERR_NULL;
        }
        let LimiterKind::Concurrency(c) = &(*l).kind else {
            return WEIR_ERR_INVALID;
        };
        let key = match bytes(key, key_len) {
            Ok(k) => k,
            Err(code) => return code,
        };
        let t = &(*z).table;
        let (v, p) = t.acquire(c, t.key_hash(key), now);
        *out = check_out(v.decision, &v);
        *permit = match p {
            Some(p) => {
                let (key_hash, bucket) = p.into_raw();
                weir_permit {
                    limit: 0,
                    key_hash,
                    bucket,
                    generation: (*z).ledger.take(),
                }
            }
            None => NO_PERMIT,
        };
        WEIR_OK
    })
}

/// Releases a permit from `weir_zone_acquire` and empties it (a second call does nothing, nor
/// does releasing a copy of a permit already released).
#[no_mangle]
pub unsafe extern "C" fn weir_zone_release(
    z: *const weir_zone,
    l: *const weir_limiter,
    permit: *mut weir_permit,
    now: u64,
) -> c_int {
    guard(|| {
        if z.is_null() || l.is_null() || permit.is_null() {
            return WEIR_ERR_NULL;
        }
        let LimiterKind::Concurrency(c) = &(*l).kind else {
            return WEIR_ERR_INVALID;
        };
        let p = std::mem::replace(&mut *permit, NO_PERMIT);
        // A copy of a permit already released (or a forged one) gives nothing back.
        if p.limit >= 0 && (*z).ledger.give_back(p.generation) {
            (*z).table
                .release(c, Permit::from_raw(p.key_hash, p.bucket), now);
        }
        WEIR_OK
    })
}

/// The in-flight count of `key` at `now` (concurrency limiters), or 0.
#[no_mangle]
pub unsafe extern "C" fn weir_zone_in_flight(
    z: *const weir_zone,
    l: *const weir_limiter,
    key: *const u8,
    key_len: usize,
    now: u64,
) -> u64 {
    let r = catch_unwind(AssertUnwindSafe(|| {
        if z.is_null() || l.is_null() {
            return 0;
        }
        let (LimiterKind::Concurrency(c), Ok(key)) = (&(*l).kind, bytes(key, key_len)) else {
            return 0;
        };
        let t = &(*z).table;
        c.in_flight(
            t.peek(t.key_hash(key)).unwrap_or(0),
            now.saturating_sub(t.clock_base()),
        )
    }));
    r.unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Exact sliding-log zones (caddy-ratelimit's semantics; docs/ARCHITECTURE.md)

/// An exact sliding-log zone: at most `events` admissions per key in any `window`, a ring of
/// event times per key, in process memory or a caller's region. Thread-safe; usable from
/// several processes when the region is shared.
pub struct weir_log_zone {
    table: weir::table::LogTable,
}

fn sliding_log(events: u64, window_ns: u64) -> Result<weir::table::SlidingLog, String> {
    weir::table::SlidingLog::new(events, window_ns).map_err(|e| e.to_string())
}

/// Bytes a log zone of `events` per window needs for `capacity` keys (0 when `events` is
/// outside 1..=4096, or when the size does not fit in a `size_t`).
#[no_mangle]
pub extern "C" fn weir_log_zone_bytes(events: u64, capacity: usize) -> usize {
    match sliding_log(events, 1_000_000_000) {
        Ok(log) => match weir::table::LogTable::bytes_for(&log, capacity) {
            usize::MAX => 0,
            bytes => bytes,
        },
        Err(_) => 0,
    }
}

/// A log zone of `bytes` in this process's memory: `events` (1..=4096) per `window_ns`
/// (at least 1 ms; kept in whole milliseconds).
#[no_mangle]
pub unsafe extern "C" fn weir_log_zone_new(
    bytes: usize,
    events: u64,
    window_ns: u64,
    out: *mut *mut weir_log_zone,
    err: *mut *mut weir_error,
) -> c_int {
    guard(|| {
        if out.is_null() {
            return fail(err, WEIR_ERR_NULL, "out is NULL");
        }
        *out = ptr::null_mut();
        let log = match sliding_log(events, window_ns) {
            Ok(l) => l,
            Err(e) => return fail(err, WEIR_ERR_INVALID, e),
        };
        match weir::table::LogTable::new(bytes, log, 0) {
            Ok(table) => give(out, weir_log_zone { table }),
            Err(e) => fail(err, WEIR_ERR_ZONE, e),
        }
    })
}

/// Creates a log zone in the caller's region (64-byte aligned, outliving the handle), or
/// attaches to the one already there when size and parameters are the same (`*existed`, may
/// be NULL, says which).
#[no_mangle]
pub unsafe extern "C" fn weir_log_zone_attach(
    region: *mut c_void,
    len: usize,
    events: u64,
    window_ns: u64,
    clock_base: u64,
    existed: *mut c_int,
    out: *mut *mut weir_log_zone,
    err: *mut *mut weir_error,
) -> c_int {
    guard(|| {
        if out.is_null() || region.is_null() {
            return fail(err, WEIR_ERR_NULL, "region or out is NULL");
        }
        *out = ptr::null_mut();
        let log = match sliding_log(events, window_ns) {
            Ok(l) => l,
            Err(e) => return fail(err, WEIR_ERR_INVALID, e),
        };
        match weir::table::LogTable::create_or_attach(region.cast(), len, log, clock_base) {
            Ok((table, kept)) => {
                if !existed.is_null() {
                    *existed = kept as c_int;
                }
                give(out, weir_log_zone { table })
            }
            Err(e) => fail(err, WEIR_ERR_ZONE, e),
        }
    })
}

/// Frees a log zone handle (NULL is ignored); a caller's region is left as it is.
#[no_mangle]
pub unsafe extern "C" fn weir_log_zone_free(z: *mut weir_log_zone) {
    take_back(z)
}

/// Checks `key` at `now` and records the event when admitted. A rejection's
/// `retry_after_ns` is when the oldest event in the window leaves it.
#[no_mangle]
pub unsafe extern "C" fn weir_log_zone_check(
    z: *const weir_log_zone,
    key: *const u8,
    key_len: usize,
    now: u64,
    out: *mut weir_check,
) -> c_int {
    guard(|| {
        if z.is_null() || out.is_null() {
            return WEIR_ERR_NULL;
        }
        let key = match bytes(key, key_len) {
            Ok(k) => k,
            Err(code) => return code,
        };
        let t = &(*z).table;
        let v = t.check(t.key_hash(key), now);
        *out = check_out(v.decision, &v);
        WEIR_OK
    })
}

/// Takes back the event `weir_log_zone_check` recorded at `now` (a later limit refused the
/// request).
#[no_mangle]
pub unsafe extern "C" fn weir_log_zone_refund(
    z: *const weir_log_zone,
    key: *const u8,
    key_len: usize,
    now: u64,
) -> c_int {
    guard(|| {
        if z.is_null() {
            return WEIR_ERR_NULL;
        }
        let key = match bytes(key, key_len) {
            Ok(k) => k,
            Err(code) => return code,
        };
        let t = &(*z).table;
        t.refund(t.key_hash(key), now);
        WEIR_OK
    })
}

/// A log zone's counters.
#[no_mangle]
pub unsafe extern "C" fn weir_log_zone_get_stats(
    z: *const weir_log_zone,
    out: *mut weir_zone_stats,
) -> c_int {
    guard(|| {
        if z.is_null() || out.is_null() {
            return WEIR_ERR_NULL;
        }
        *out = (*z).table.stats().into();
        WEIR_OK
    })
}
