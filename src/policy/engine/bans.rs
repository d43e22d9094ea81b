//! Ban periods (a limit's `ban`): the strikes that start a ban and the refusals during it.
//!
//! A key's ban state lives in its limit's own zone table, beside its rate (or concurrency)
//! state, under a derived key hash ([`ban_hash`]: the key's hash and the limit's ban id), and
//! changes with the table's one update protocol ([`crate::limiter::Ban`] is the pure step).
//! So a ban is shared by every process that shares the zone, and lives as long as the zone's
//! states (a reload that keeps the zone keeps its bans). The compare-exchange that turns a
//! key's state to banned is the one that lists and announces the ban: once per ban.
//!
//! Ban id: a limit's bans are stored under its name, never its position, so adding, removing
//! or reordering other limits leaves them where they are. The id also holds a generation the
//! zone keeps for the name (`generations`): it lasts while the name has `ban` on that zone
//! reload after reload, and is drawn anew when the name comes back after a reload without it
//! (its `ban` removed, the limit removed, renamed or moved to another zone). So removing
//! `ban` lifts the limit's bans, and putting it back starts with none: old entries are under
//! another id, unseen, and the zone evicts them as they end.
//!
//! Scope: a ban refuses the requests its limit applies to, with that key (other limits and
//! other keys are unaffected). Cost: limits without `ban` pay nothing (one test per request
//! when no limit has one); a limit with `ban` pays one table read of its ban entry per
//! request, before anything is charged, and one table update per rejection.

use super::*;
use crate::limiter::Ban;

/// Salt that turns a limit's key hash into the hash of its ban entry (same table).
const BAN_SALT: u64 = 0x4241_4e5f_5354_4154;

/// The hash of the ban entry of key `key_hash` of the limit whose ban id is `ban_id`.
#[inline]
pub(super) fn ban_hash(key_hash: u64, ban_id: u64) -> u64 {
    ((key_hash ^ BAN_SALT).wrapping_add(ban_id).rotate_left(29)).max(1)
}

impl Engine {
    /// The first hit whose key is banned by its (enforced) limit, with what is left of the
    /// ban. Small results, in registers: the common answer (`None`) costs the caller nothing.
    #[inline(never)]
    pub(super) fn banned_hit(&self, hits: &[Hit], now: u64) -> Option<(usize, u64)> {
        for h in hits {
            let limit = &self.policy.limits[h.limit];
            let (Some(ban), false) = (&limit.ban, limit.dry_run) else {
                continue;
            };
            let left = self.tables[limit.zone].update(
                ban_hash(h.key_hash, self.ban_ids[h.limit]),
                now,
                |s, n| ban.residual(s, n),
                |s, n| (s, ban.left(s, n)),
                false,
            );
            if let Some(left) = left {
                return Some((h.limit, left));
            }
        }
        None
    }

    /// The rejection of a request whose key `limit` bans for `left` more ns: nothing is
    /// charged (a queued request gives its place back), `Retry-After` is what is left.
    #[cold]
    #[inline(never)]
    pub(super) fn refuse_banned(
        &self,
        limit: usize,
        left: u64,
        ticket: Option<QueueTicket>,
        now: u64,
    ) -> Outcome {
        if let Some(t) = ticket {
            self.abandon(t, now);
        }
        self.counters.add_limit(limit, |c| &c.banned);
        let mut out = Outcome::new();
        out.action = Action::Reject;
        out.status = self.policy.limits[limit].status;
        out.retry_after_ns = left;
        out.limit = Some(limit as u16);
        out.excess_milli = 1000;
        out.banned = true;
        out
    }

    /// Counts a rejection of key `key_hash` by `limit` toward its ban; when it starts the ban,
    /// lists it and reports it in `out` (whose `Retry-After` becomes the ban's duration).
    #[cold]
    #[inline(never)]
    pub(super) fn strike(
        &self,
        out: &mut Outcome,
        limit: usize,
        ban: &Ban,
        key_hash: u64,
        req: &PreparedRequest<'_>,
        now: u64,
    ) {
        let l = &self.policy.limits[limit];
        let table = &self.tables[l.zone];
        let hash = ban_hash(key_hash, self.ban_ids[limit]);
        let started = table.update(
            hash,
            now,
            |s, n| ban.residual(s, n),
            |s, n| ban.strike(s, n),
            true,
        );
        if started.is_some() {
            let until = now.saturating_add(ban.duration_ns());
            let reference = self.key_reference(limit, key_hash);
            let entry = self
                .counters
                .add_ban(limit, hash, &l.key, req, reference, until, now);
            out.retry_after_ns = ban.duration_ns();
            out.ban_started = Some(BanStarted {
                entry: entry.map(|e| e as u16),
            });
        }
    }

    /// The ban listed in entry `entry` ([`BanStarted::entry`]) while it lasts at `now` and
    /// its limit enforces it: its limit and the ban (its key named as the status names keys).
    pub fn listed_ban(
        &self,
        entry: usize,
        now: u64,
    ) -> Option<(usize, crate::policy::topkeys::ActiveBan)> {
        let (limit, hash, ban) = self.counters.ban(entry, now)?;
        self.enforces(limit, hash, now).then_some((limit, ban))
    }

    /// Lists again the bans listed in `old`, the counter block this engine's host used for
    /// the policy before (when its limits changed, the block moves: nginx gives a new one), so
    /// that the bans that stay enforced stay listed; how many. Call it before requests flow.
    pub fn carry_bans(&self, old: crate::region::Region, now: u64) -> usize {
        self.counters.carry_bans(old, now)
    }

    /// Limit `limit`'s listed bans that it enforces at `now`, ending last first.
    pub(super) fn enforced_bans(
        &self,
        limit: usize,
        now: u64,
    ) -> Vec<crate::policy::topkeys::ActiveBan> {
        let listed = self.counters.bans_of(limit, now).into_iter();
        (listed.filter(|(hash, _)| self.enforces(limit, *hash, now)))
            .map(|(_, ban)| ban)
            .collect()
    }

    /// Whether limit `limit` refuses the key whose ban entry is `hash` at `now`: the list
    /// shows only such bans (a listed ban whose entry the zone evicted, or whose limit lost
    /// its `ban` on a reload, is not shown).
    fn enforces(&self, limit: usize, hash: u64, now: u64) -> bool {
        let l = &self.policy.limits[limit];
        let table = &self.tables[l.zone];
        let rel = now.saturating_sub(table.clock_base());
        (l.ban.as_ref().filter(|_| self.ban_ids[limit] != 0))
            .is_some_and(|b| b.left(table.peek(hash).unwrap_or(0), rel).is_some())
    }
}
