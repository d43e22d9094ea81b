//! Response headers for an outcome (`Retry-After`, `RateLimit-Policy`, `RateLimit`), formatted without allocating.

use super::*;

impl Engine {
    /// Name of limit `i`.
    pub fn limit_name(&self, i: usize) -> &str {
        &self.policy.limits[i].name
    }

    /// The response fields for an outcome: `Retry-After` on rejection, and `RateLimit-Policy` /
    /// `RateLimit` (draft-ietf-httpapi-ratelimit-headers) when the policy enables them.
    /// Formats into a stack buffer; `emit` receives each (name, value).
    pub fn headers(&self, out: &Outcome, mut emit: impl FnMut(&str, &str)) {
        if out.action != Action::Reject && !self.policy.emit_headers {
            return; // most passes: no buffer to set up
        }
        if out.action == Action::Reject {
            // itoa, not `write!`: a flood of refusals formats one per request.
            emit(
                "Retry-After",
                itoa::Buffer::new().format(out.retry_after_s()),
            );
        }
        if !self.policy.emit_headers {
            return;
        }
        if let Some(q) = out.quota {
            let name = self.limit_name(q.limit as usize);
            let mut buf = StackStr::new();
            let _ = write!(buf, "\"{}\";q={};w={}", name, q.quota, q.window_s);
            emit("RateLimit-Policy", buf.as_str());
            buf.clear();
            let _ = write!(buf, "\"{}\";r={};t={}", name, q.remaining, q.reset_s);
            emit("RateLimit", buf.as_str());
        }
    }
}

/// A small fixed buffer for formatting header values without allocating.
pub(super) struct StackStr {
    pub(super) buf: [u8; 256],
    pub(super) len: usize,
}

impl StackStr {
    pub(super) fn new() -> StackStr {
        StackStr {
            buf: [0; 256],
            len: 0,
        }
    }
    pub(super) fn clear(&mut self) {
        self.len = 0;
    }
    pub(super) fn as_str(&self) -> &str {
        // Only whole `&str`s are ever appended (see `write_str`).
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl std::fmt::Write for StackStr {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        if end > self.buf.len() {
            return Err(std::fmt::Error);
        }
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}
