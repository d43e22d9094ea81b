//! Evaluating requests: the request view, verdicts, queue tickets and permits.

use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::net::IpAddr;
use std::ptr;

use weir::policy::engine::{Action, Permits, QueueTicket, RawPermit, MAX_PERMITS, MAX_SELECTED};
use weir::policy::{Engine, EvalError, RequestView};

use crate::{bytes, guard, weir_engine, MAX_LEN};
use crate::{put_charges, weir_charge, NO_CHARGE, WEIR_MAX_CHARGES};
use crate::{WEIR_DELAY, WEIR_ERR_BAD_TARGET, WEIR_ERR_INVALID, WEIR_ERR_NULL, WEIR_OK};
use crate::{WEIR_PASS, WEIR_QUEUE, WEIR_REJECT};

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

/// Variable lookup for `weir_request`: store a pointer to the value of variable `index` (its
/// name is `weir_engine_var_name(engine, index)`) in `*value`/`*value_len` and return 1, or
/// return 0 when it has none. Called with the request's `header_ctx`. The value must stay
/// valid until the evaluating call returns. An absent or empty value leaves the limits keyed
/// by the variable out of the request.
pub type weir_var_fn = Option<
    unsafe extern "C" fn(
        ctx: *mut c_void,
        index: usize,
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
    /// Passed to `header` and `var`.
    pub header_ctx: *mut c_void,
    /// May be NULL: the request then has no variables (`var:` key parts).
    pub var: weir_var_fn,
    /// The peer in binary, network byte order, read instead of `peer` when `peer_ip_len` is 4
    /// (IPv4) or 16 (IPv6): a host holding the address in binary skips formatting and parsing
    /// it. 0: `peer` is read; any other length is WEIR_ERR_INVALID.
    pub peer_ip: [u8; 16],
    pub peer_ip_len: usize,
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

pub(crate) const NO_PERMIT: weir_permit = weir_permit {
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
    /// WEIR_REJECT of a queued request whose wait ended (its limit's `timeout`): counted as
    /// queued, not again as rejected.
    pub queue_timeout: u8,
    /// For WEIR_DELAY: how long to hold the request; for WEIR_QUEUE: how long to wait before
    /// asking again (`weir_engine_evaluate_queued`).
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
    /// Set when the header buffer was too small and lines were left out (never by
    /// `weir_engine_evaluate_selected`, which writes none).
    pub headers_truncated: u8,
    /// Concurrency permits held by an admitted request, the held ones first (`limit < 0`
    /// after them): release with `weir_engine_release`.
    pub permits: [weir_permit; WEIR_MAX_PERMITS],
    /// For WEIR_QUEUE: the queue place (pass the verdict back to `weir_engine_evaluate_queued`
    /// or `weir_engine_abandon`).
    pub ticket: weir_permit,
    /// For WEIR_QUEUE: when the wait ends, on the engine's clock (the ticket's; read by
    /// `weir_engine_evaluate_queued`, which answers WEIR_REJECT from then on).
    pub ticket_deadline_ns: u64,
    /// For WEIR_REJECT and WEIR_DELAY: the deciding limit's excess in thousandths of a request,
    /// as nginx logs it ("excess: 1.500"): for a gcra limit how far ahead of its rate the key
    /// is, in requests (less one interval for a delay); 1000 for another limit's rejection.
    pub excess_milli: u64,
    /// The same for `dry_run_limit`.
    pub dry_run_excess_milli: u64,
    /// Set for a WEIR_REJECT because the key is banned by `limit` (its `ban`): nothing was
    /// charged, `retry_after_s` is what is left of the ban.
    pub banned: u8,
    /// This WEIR_REJECT started a ban of `limit` lasting this many seconds (0: none). Exactly
    /// one request reports each ban; `weir_engine_outcome` logs it with its key.
    pub ban_s: u64,
    /// The started ban's entry in the engine's list of bans (for its key), or -1.
    pub ban_entry: i32,
    /// The deferred charges of the `charge_on_status` limits a WEIR_PASS or WEIR_DELAY passed,
    /// the used ones first: hand them back with the response status through
    /// `weir_engine_charge` (before `weir_engine_release`). Copies are harmless, as for permits.
    pub charges: [weir_charge; WEIR_MAX_CHARGES],
    /// The charges' entry in the engine's record of what is handed out (as a permit's).
    pub charges_generation: u64,
}

/// A `weir_request` seen as the engine's request view.
pub(crate) struct CRequest<'a> {
    method: &'a [u8],
    target: &'a [u8],
    peer: Option<IpAddr>,
    header: weir_header_fn,
    var: weir_var_fn,
    ctx: *mut c_void,
    /// The last variable asked for and its answer (`index`, pointer, length, found): a key
    /// is read again to name it (a rejection's top keys), and a host's variable can cost as
    /// much as the engine's decision (nginx evaluates a complex value each time).
    last_var: Cell<(usize, *const u8, usize, bool)>,
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
    fn var(&self, index: usize) -> Option<&[u8]> {
        let f = self.var?;
        let (last, mut v, mut len, mut found) = self.last_var.get();
        if last != index {
            (v, len) = (ptr::null::<u8>(), 0usize);
            // SAFETY: as for `header_nth`: the callback's value outlives this borrow.
            found = unsafe { f(self.ctx, index, &mut v, &mut len) == 1 };
            self.last_var.set((index, v, len, found));
        }
        // SAFETY: as above; a remembered answer is the same call's.
        found.then(|| unsafe { bytes(v, len).ok() }).flatten()
    }
}

pub(crate) unsafe fn request<'a>(r: *const weir_request) -> Result<CRequest<'a>, c_int> {
    if r.is_null() {
        return Err(WEIR_ERR_NULL);
    }
    let r = &*r;
    let peer = match r.peer_ip_len {
        0 => match bytes(r.peer, r.peer_len)? {
            p if p.is_empty() || p.starts_with(b"unix:") => None,
            p => Some(crate::peer::parse(p).ok_or(WEIR_ERR_INVALID)?),
        },
        4 => Some(IpAddr::from([
            r.peer_ip[0],
            r.peer_ip[1],
            r.peer_ip[2],
            r.peer_ip[3],
        ])),
        16 => Some(IpAddr::from(r.peer_ip)),
        _ => return Err(WEIR_ERR_INVALID),
    };
    Ok(CRequest {
        method: bytes(r.method, r.method_len)?,
        target: bytes(r.target, r.target_len)?,
        peer,
        header: r.header,
        var: r.var,
        ctx: r.header_ctx,
        last_var: Cell::new((usize::MAX, ptr::null(), 0, false)),
    })
}

pub(crate) fn empty_verdict() -> weir_verdict {
    weir_verdict {
        action: WEIR_PASS,
        status: 200,
        unmatched: 0,
        queue_timeout: 0,
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
        ticket_deadline_ns: 0,
        excess_milli: 0,
        dry_run_excess_milli: 0,
        banned: 0,
        ban_s: 0,
        ban_entry: -1,
        charges: [NO_CHARGE; WEIR_MAX_CHARGES],
        charges_generation: 0,
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
pub(crate) fn held(e: &Engine, p: &weir_permit) -> Result<Option<RawPermit>, c_int> {
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
    Ok(t.map(|raw| QueueTicket::from_raw(raw, v.ticket_deadline_ns)))
}

/// What an evaluating call asks: with the ticket of a queued request (handed back unless still
/// queued), of the limits the host selects (`None`: those the policy's classes match).
struct Ask<'a> {
    ticket: Option<QueueTicket>,
    limits: Option<&'a [u16]>,
}

unsafe fn evaluate(
    e: *const weir_engine,
    r: *const weir_request,
    now: u64,
    Ask { ticket, limits }: Ask<'_>,
    out: *mut weir_verdict,
    header_buf: *mut u8,
    header_cap: usize,
) -> c_int {
    if out.is_null() {
        return WEIR_ERR_NULL;
    }
    // Written whole on every path, errors included: hosts keep verdicts in memory they
    // need not clear first.
    out.write(empty_verdict());
    if e.is_null() || header_buf.is_null() && header_cap > 0 {
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
    // The outcome is read in place and the verdict written in place: moving either (a few
    // hundred bytes each) cost more than the engine's whole decision for a hot key.
    let mut outcome = match (ticket, limits) {
        (Some(t), None) => engine.evaluate_queued(&req, now, t),
        (None, None) => engine.evaluate(&req, now),
        (Some(t), Some(limits)) => engine.evaluate_selected_queued(&req, limits, now, t),
        (None, Some(limits)) => engine.evaluate_selected(&req, limits, now),
    };
    let o = match &mut outcome {
        Ok(o) => o,
        Err(EvalError::BadSelection) => return WEIR_ERR_INVALID,
        Err(_) => {
            (*out).action = WEIR_REJECT;
            (*out).status = 400;
            return WEIR_ERR_BAD_TARGET;
        }
    };
    let v = &mut *out;
    v.action = action_code(o.action);
    v.status = o.status;
    v.unmatched = o.unmatched as u8;
    v.queue_timeout = o.queue_timeout as u8;
    v.wait_ns = o.wait_ns;
    v.limit = o.limit.map_or(-1, i32::from);
    v.exempt = o.exempt.map_or(-1, i32::from);
    v.excess_milli = o.excess_milli;
    if o.action == Action::Reject {
        v.retry_after_s = o.retry_after_s();
        v.banned = o.banned as u8;
        if let Some(b) = o.ban_started {
            let limit = o
                .limit
                .and_then(|l| engine.policy().limits.get(usize::from(l)));
            let ns = limit.and_then(|l| l.ban).map_or(1, |b| b.duration_ns());
            v.ban_s = ns.div_ceil(1_000_000_000);
            v.ban_entry = b.entry.map_or(-1, i32::from);
        }
    }
    if let Some((l, a)) = o.dry_run {
        v.dry_run_limit = l as i32;
        v.dry_run_action = action_code(a);
        v.dry_run_excess_milli = o.dry_run_excess_milli;
    }
    if header_cap > 0 {
        // Header lines into the caller's buffer.
        let buf = std::slice::from_raw_parts_mut(header_buf, header_cap.min(MAX_LEN));
        let mut used = 0;
        engine.headers(o, |name, value| {
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
    } else if limits.is_none() {
        engine.headers(o, |_, _| v.headers_truncated = 1);
    }
    if !o.permits.is_empty() {
        let permits = std::mem::take(&mut o.permits).into_raw();
        for (slot, raw) in v.permits.iter_mut().zip(permits) {
            *slot = raw_permit(raw);
        }
    }
    if !o.charges.is_empty() {
        put_charges(v, std::mem::take(&mut o.charges));
    }
    if let Some(t) = o.ticket.take() {
        v.ticket_deadline_ns = t.deadline_ns();
        v.ticket = raw_permit(Some(t.into_raw()));
    }
    WEIR_OK
}

/// Evaluates a request at `now` (CLOCK_MONOTONIC ns). Fills `*out`, on errors too (a pass
/// with no limit and no permits); response header lines ("Retry-After: 3\r\n", and RateLimit
/// fields when the policy enables them) are written to `header_buf` (may be NULL when
/// `header_cap` is 0). A target nginx would answer 400, or more
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
    guard(|| {
        evaluate(
            e,
            r,
            now,
            Ask {
                ticket: None,
                limits: None,
            },
            out,
            header_buf,
            header_cap,
        )
    })
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
            Ok(ticket) => {
                let ask = Ask {
                    ticket,
                    limits: None,
                };
                evaluate(e, r, now, ask, v, header_buf, header_cap)
            }
            Err(code) => code,
        }
    })
}

/// The `n` limit indexes at `limits` (NULL only when `n` is 0).
unsafe fn limit_list<'a>(limits: *const u16, n: usize) -> Result<&'a [u16], c_int> {
    if n == 0 {
        return Ok(&[]);
    }
    if limits.is_null() {
        return Err(WEIR_ERR_NULL);
    }
    if n > MAX_SELECTED {
        return Err(WEIR_ERR_INVALID);
    }
    Ok(std::slice::from_raw_parts(limits, n))
}

/// Evaluates a request against exactly the `n` limits at `limits` (indexes, in this order),
/// as a host's own directives select them: no exemptions, no classes; charged in order, a
/// rejection gives back every charge before it, the longest delay decides; a dry-run limit's
/// would-be rejection also gives everything back and is reported (`dry_run_*`), as nginx's
/// `*_dry_run` does. `unmatched` is set when no listed limit applied (each had an absent or
/// empty `var:` part). The target is parsed only when a listed key reads the path. An index
/// naming no limit, more than 32 limits or more than WEIR_MAX_PERMITS concurrency limits give
/// WEIR_ERR_INVALID and charge nothing. No response header lines: hosts with directives
/// write their own. Errors otherwise as `weir_engine_evaluate`.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_evaluate_selected(
    e: *const weir_engine,
    r: *const weir_request,
    limits: *const u16,
    n: usize,
    now: u64,
    out: *mut weir_verdict,
) -> c_int {
    guard(|| match limit_list(limits, n) {
        Ok(list) => {
            let ask = Ask {
                ticket: None,
                limits: Some(list),
            };
            evaluate(e, r, now, ask, out, ptr::null_mut(), 0)
        }
        Err(code) => code,
    })
}

/// `weir_engine_evaluate_queued` for `weir_engine_evaluate_selected` (the same `limits`).
#[no_mangle]
pub unsafe extern "C" fn weir_engine_evaluate_selected_queued(
    e: *const weir_engine,
    r: *const weir_request,
    limits: *const u16,
    n: usize,
    now: u64,
    v: *mut weir_verdict,
) -> c_int {
    guard(|| {
        if e.is_null() || v.is_null() {
            return WEIR_ERR_NULL;
        }
        let list = match limit_list(limits, n) {
            Ok(l) => l,
            Err(code) => return code,
        };
        match take_ticket(&(*e).engine, &mut *v) {
            Ok(ticket) => {
                let ask = Ask {
                    ticket,
                    limits: Some(list),
                };
                evaluate(e, r, now, ask, v, ptr::null_mut(), 0)
            }
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
    weir_engine_release_sampled(e, v, 0, 0, now)
}

/// `weir_engine_release` with the backend's time for the request, `latency_ns` (0: unknown,
/// as `weir_engine_release`), and the response's `status` (0: none): it teaches learned
/// limits (`max = "auto"`) and feeds the latency figures of the concurrency limits held.
/// The backend's time is the upstream's (nginx: `$upstream_response_time`), not the time a
/// client took to read the response.
#[no_mangle]
pub unsafe extern "C" fn weir_engine_release_sampled(
    e: *const weir_engine,
    v: *mut weir_verdict,
    latency_ns: u64,
    status: u16,
    now: u64,
) -> c_int {
    guard(|| {
        if e.is_null() || v.is_null() {
            return WEIR_ERR_NULL;
        }
        match take_permits(&(*e).engine, &mut *v) {
            Ok(permits) => {
                let sample =
                    (latency_ns > 0).then_some(weir::policy::engine::Sample { latency_ns, status });
                (*e).engine.release_sampled(permits, sample, now);
                WEIR_OK
            }
            Err(code) => code,
        }
    })
}
