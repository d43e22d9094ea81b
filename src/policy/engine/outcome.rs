//! What an evaluation answers: the action, the permits and queue ticket to give back, the quota, errors.

use super::*;

/// What the host should do with the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Go ahead now.
    Pass,
    /// Go ahead after [`Outcome::wait_ns`].
    Delay,
    /// Answer [`Outcome::status`] with `Retry-After`.
    Reject,
    /// A concurrency limit is full but has queue room: wait [`Outcome::wait_ns`], then call
    /// [`Engine::evaluate_queued`] again with the ticket (once the limit's `timeout` has
    /// passed it answers [`Action::Reject`]), or [`Engine::abandon`] it (the client left).
    Queue,
}

/// A place in a concurrency limit's wait queue; hand it back exactly once.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a queue ticket must be handed back (evaluate_queued or abandon)"]
pub struct QueueTicket {
    pub(super) limit: u16,
    pub(super) permit: Permit,
    /// Its entry in the engine's [`Ledger`].
    pub(super) generation: u64,
    /// When the wait ends, on the engine's clock.
    pub(super) deadline_ns: u64,
}

/// How often a queued request asks again at most: [`Outcome::wait_ns`] of a queued request
/// is this, or less when its deadline is nearer.
pub const QUEUE_POLL_NS: u64 = 10_000_000;

/// A permit or queue ticket as plain data, for hosts that carry them across an FFI. A copy
/// handed back after the original (or a forged one) changes nothing: `generation` names the
/// engine's record of it ([`super::ledger`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawPermit {
    /// Index of the concurrency limit.
    pub limit: u16,
    pub key_hash: u64,
    pub bucket: u64,
    pub generation: u64,
}

/// A queue: a concurrency limit and a key. A permit given back frees a slot for the tickets
/// of its queue ([`Permits::queues`], [`QueueTicket::queue`]): hosts wake one of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QueueId {
    pub limit: u16,
    pub key_hash: u64,
}

impl QueueTicket {
    /// Index of the concurrency limit this ticket waits for.
    pub fn limit(&self) -> usize {
        self.limit as usize
    }

    /// The queue this ticket waits in.
    pub fn queue(&self) -> QueueId {
        QueueId {
            limit: self.limit,
            key_hash: self.permit.key_hash ^ super::QUEUE_SALT,
        }
    }

    /// When the wait ends (the engine's clock); hosts that carry tickets across an FFI hand
    /// it back to [`QueueTicket::from_raw`].
    pub fn deadline_ns(&self) -> u64 {
        self.deadline_ns
    }

    /// How long to wait before asking again at `now`: [`QUEUE_POLL_NS`], or less to wake at
    /// the deadline (at least 1 ns).
    pub(super) fn next_wait(&self, now: u64) -> u64 {
        self.deadline_ns.saturating_sub(now).clamp(1, QUEUE_POLL_NS)
    }

    /// The raw parts, for hosts that carry tickets across an FFI.
    pub fn into_raw(self) -> RawPermit {
        let (key_hash, bucket) = self.permit.into_raw();
        RawPermit {
            limit: self.limit,
            key_hash,
            bucket,
            generation: self.generation,
        }
    }

    /// Rebuilds a ticket from [`QueueTicket::into_raw`]'s parts and its
    /// [`QueueTicket::deadline_ns`].
    pub fn from_raw(raw: RawPermit, deadline_ns: u64) -> QueueTicket {
        QueueTicket {
            limit: raw.limit,
            permit: Permit::from_raw(raw.key_hash, raw.bucket),
            generation: raw.generation,
            deadline_ns,
        }
    }
}

/// Concurrency permits held by an admitted request; release them when the response is done.
#[derive(Debug, Default)]
#[must_use = "permits must be released with Engine::release"]
pub struct Permits {
    /// The held permits first (limit, permit, ledger generation), then `None`s.
    pub(super) held: [Option<(u16, Permit, u64)>; MAX_PERMITS],
}

impl Permits {
    pub fn is_empty(&self) -> bool {
        self.held[0].is_none()
    }

    /// The queues whose waiters these permits, once given back, free a slot for.
    pub fn queues(&self) -> impl Iterator<Item = QueueId> + '_ {
        self.held.iter().map_while(|h| {
            h.as_ref().map(|(limit, p, _)| QueueId {
                limit: *limit,
                key_hash: p.key_hash,
            })
        })
    }

    /// The raw parts of each held permit, consuming them.
    pub fn into_raw(self) -> [Option<RawPermit>; MAX_PERMITS] {
        self.held.map(|h| {
            h.map(|(limit, p, generation)| {
                let (key_hash, bucket) = p.into_raw();
                RawPermit {
                    limit,
                    key_hash,
                    bucket,
                    generation,
                }
            })
        })
    }

    /// Rebuilds permits from [`Permits::into_raw`]'s parts (in any order, with gaps).
    pub fn from_raw(raw: [Option<RawPermit>; MAX_PERMITS]) -> Permits {
        let mut permits = Permits::default();
        for r in raw.into_iter().flatten() {
            permits.push(
                r.limit as usize,
                Permit::from_raw(r.key_hash, r.bucket),
                r.generation,
            );
        }
        permits
    }

    pub(super) fn push(&mut self, limit: usize, p: Permit, generation: u64) {
        let slot = self
            .held
            .iter_mut()
            .find(|s| s.is_none())
            .expect("MAX_PERMITS exceeded");
        *slot = Some((limit as u16, p, generation));
    }
}

/// The deferred charges of an admitted request: its `charge_on_status` limits, checked but
/// not charged. Hand them to [`Engine::charge_response`] with the response status once the
/// response is known (before releasing the request's permits), or with status 0 when there
/// is no response; a set handed back twice (a stale copy) charges nothing the second time.
#[derive(Debug, Default)]
#[must_use = "deferred charges must be handed to Engine::charge_response"]
pub struct Charges {
    /// Limit index + 1 of each charge, the used ones first, then 0 (all zero when empty, so
    /// an outcome without charges is initialized with the zeros around it).
    pub(super) limits: [u16; MAX_CHARGES],
    /// The key hash of each used entry.
    pub(super) keys: [u64; MAX_CHARGES],
    /// Its entry in the engine's [`Ledger`].
    pub(super) generation: u64,
}

/// One deferred charge as plain data, for hosts that carry charges across an FFI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawCharge {
    /// Index of the rate limit with `charge_on_status`.
    pub limit: u16,
    pub key_hash: u64,
}

impl Charges {
    pub fn is_empty(&self) -> bool {
        self.limits[0] == 0
    }

    /// The charges (limit, key hash), in order.
    pub(super) fn due(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        (self.limits.iter().zip(&self.keys))
            .take_while(|(l, _)| **l != 0)
            .map(|(l, k)| (usize::from(*l) - 1, *k))
    }

    /// Adds limit `limit`'s charge of key `key_hash` (once; a full set ignores more, which
    /// a validated policy never has).
    pub(super) fn push(&mut self, limit: usize, key_hash: u64) {
        for (l, k) in self.limits.iter_mut().zip(&mut self.keys) {
            if *l == 0 {
                (*l, *k) = (limit as u16 + 1, key_hash);
                return;
            }
            if usize::from(*l) == limit + 1 && *k == key_hash {
                return;
            }
        }
    }

    /// The raw parts, consuming the set: each charge and the set's ledger generation.
    pub fn into_raw(self) -> ([Option<RawCharge>; MAX_CHARGES], u64) {
        let mut raw = [None; MAX_CHARGES];
        for (slot, (limit, key_hash)) in raw.iter_mut().zip(self.due()) {
            *slot = Some(RawCharge {
                limit: limit as u16,
                key_hash,
            });
        }
        (raw, self.generation)
    }

    /// Rebuilds a set from [`Charges::into_raw`]'s parts (in any order, with gaps).
    pub fn from_raw(raw: [Option<RawCharge>; MAX_CHARGES], generation: u64) -> Charges {
        let mut c = Charges {
            generation,
            ..Charges::default()
        };
        for r in raw.into_iter().flatten() {
            c.push(usize::from(r.limit), r.key_hash);
        }
        c
    }
}

/// Numbers for the `RateLimit` / `RateLimit-Policy` fields: the matched rate limit with the
/// least room left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quota {
    pub limit: u16,
    /// `q`: requests per window.
    pub quota: u64,
    /// `w`: window in seconds.
    pub window_s: u64,
    /// `r`: requests left.
    pub remaining: u64,
    /// `t`: seconds until the quota is whole again.
    pub reset_s: u64,
}

/// The engine's answer for one request.
#[derive(Debug)]
pub struct Outcome {
    pub action: Action,
    /// Response status for [`Action::Reject`] (and for a queue that times out).
    pub status: u16,
    /// For [`Action::Delay`]: how long to hold the request; for [`Action::Queue`]: how long
    /// to wait before asking again.
    pub wait_ns: u64,
    /// For [`Action::Reject`]: when the request would conform.
    pub retry_after_ns: u64,
    /// The limit that decided a delay, rejection or queueing.
    pub limit: Option<u16>,
    /// The exemption that matched.
    pub exempt: Option<u16>,
    /// No limit matched (and no exemption).
    pub unmatched: bool,
    /// A rejection because a queued request's wait ended. It was counted as queued, and is
    /// not counted again.
    pub queue_timeout: bool,
    /// For a rejection or delay: the deciding limit's excess in thousandths of a request, as
    /// nginx logs it (`excess: 1.500`). A GCRA limit's is how far ahead of its schedule the
    /// key is, in requests: for a rejection `burst + retry_after / T`, for a delay the time
    /// ahead less one interval, over `T`; any other limit's is 1000 for a rejection.
    pub excess_milli: u64,
    /// A dry-run limit that would have delayed or rejected, and what it would have done.
    pub dry_run: Option<(u16, Action)>,
    /// The excess of [`Outcome::dry_run`]'s limit, as [`Outcome::excess_milli`].
    pub dry_run_excess_milli: u64,
    /// On a rejection, the rejecting limit's quota; otherwise the tightest matched quota, and
    /// only when the policy emits RateLimit headers.
    pub quota: Option<Quota>,
    pub permits: Permits,
    /// The `charge_on_status` limits the request passed, to charge by its response status
    /// ([`Engine::charge_response`]). Empty unless the action is a pass or a delay.
    pub charges: Charges,
    pub ticket: Option<QueueTicket>,
    /// A rejection because the key is banned by [`Outcome::limit`] (`ban`): refused without
    /// being charged, `retry_after_ns` is what is left of the ban.
    pub banned: bool,
    /// This rejection started a ban (exactly one request does per ban): log it once.
    pub ban_started: Option<BanStarted>,
}

/// A ban this request started (by [`Outcome::limit`], for its `ban`'s duration). Small: it
/// fits in the outcome's padding, so outcomes without bans cost nothing more to move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BanStarted {
    /// Its entry in the engine's list of bans ([`Engine::listed_ban`]), `None` when the list
    /// could not take it.
    pub entry: Option<u16>,
}

impl Outcome {
    pub(super) fn new() -> Outcome {
        Outcome {
            action: Action::Pass,
            status: 200,
            wait_ns: 0,
            retry_after_ns: 0,
            limit: None,
            excess_milli: 0,
            exempt: None,
            unmatched: false,
            queue_timeout: false,
            dry_run: None,
            dry_run_excess_milli: 0,
            quota: None,
            permits: Permits::default(),
            charges: Charges::default(),
            ticket: None,
            banned: false,
            ban_started: None,
        }
    }

    /// `Retry-After` in whole seconds, rounded up (at least 1 for a rejection).
    pub fn retry_after_s(&self) -> u64 {
        self.retry_after_ns.div_ceil(NS_PER_SEC).max(1)
    }
}

/// Why a request could not be evaluated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvalError {
    /// A target nginx answers 400 for.
    BadTarget(UriError),
    /// More than [`MAX_HEADER_VALUES`] values of one header the policy reads (answer 400);
    /// nothing was charged.
    TooManyHeaderValues,
    /// [`Engine::evaluate_selected`] was given an index that names no limit, more than
    /// [`MAX_SELECTED`] limits, or more than [`MAX_PERMITS`] concurrency limits; nothing was
    /// charged.
    BadSelection,
}

impl std::fmt::Display for EvalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EvalError::BadTarget(e) => write!(f, "bad request target: {e}"),
            EvalError::TooManyHeaderValues => write!(
                f,
                "more than {MAX_HEADER_VALUES} values of one header the policy reads"
            ),
            EvalError::BadSelection => write!(
                f,
                "the selected limits name no limit, or more than {MAX_SELECTED} limits or {MAX_PERMITS} concurrency limits"
            ),
        }
    }
}

impl std::error::Error for EvalError {}
