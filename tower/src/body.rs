//! The response body that holds a request's concurrency permits, and the guards that hand
//! permits and queue places back to the engine when dropped.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use weir::policy::engine::{Charges, Outcome, Permits, QueueTicket, Sample, MAX_PERMITS};

use crate::Config;

/// What an admitted request holds until its response: its concurrency permits, released when
/// dropped (with the backend's time, once the inner service answered), and its deferred
/// charges (`charge_on_status`), charged with the response status by
/// [`PermitGuard::answered`] — or, when no response came (an inner-service error, a dropped
/// future), handed back on drop uncharged. Boxed ([`PermitGuard::new`]): the futures and
/// bodies of requests that hold nothing stay small.
pub(crate) struct PermitGuard {
    cfg: Arc<Config>,
    permits: Permits,
    charges: Charges,
    /// When the inner service was called, on the layer's clock.
    called_ns: u64,
    /// The inner service's time and status, given back with the permits.
    sample: Option<Sample>,
}

impl PermitGuard {
    /// `None` when `out` holds neither permits nor charges (no allocation).
    #[inline]
    pub(crate) fn new(cfg: &Arc<Config>, out: &mut Outcome) -> Option<Box<PermitGuard>> {
        if out.permits.is_empty() && out.charges.is_empty() {
            return None;
        }
        Some(Box::new(PermitGuard {
            cfg: cfg.clone(),
            permits: std::mem::take(&mut out.permits),
            charges: std::mem::take(&mut out.charges),
            called_ns: 0,
            sample: None,
        }))
    }

    /// The inner service is being called: the backend's time starts now.
    pub(crate) fn calling(&mut self) {
        if !self.permits.is_empty() {
            self.called_ns = self.cfg.clock.now_ns();
        }
    }

    /// The inner service answered `status`: charges the deferred charges (before any permit
    /// goes back) and keeps the inner service's time for the release; the guard, if it still
    /// holds permits.
    pub(crate) fn answered(mut self: Box<Self>, status: u16) -> Option<Box<PermitGuard>> {
        let now = self.cfg.clock.now_ns();
        if !self.charges.is_empty() {
            let charges = std::mem::take(&mut self.charges);
            self.cfg.engine.charge_response(charges, status, now);
        }
        if self.permits.is_empty() {
            return None;
        }
        self.sample = Some(Sample {
            latency_ns: now.saturating_sub(self.called_ns),
            status,
        });
        Some(self)
    }
}

impl Drop for PermitGuard {
    fn drop(&mut self) {
        let now = self.cfg.clock.now_ns();
        if !self.charges.is_empty() {
            // No response: status 0 charges nothing.
            self.cfg
                .engine
                .charge_response(std::mem::take(&mut self.charges), 0, now);
        }
        if !self.permits.is_empty() {
            let mut queues = [None; MAX_PERMITS];
            let waiting = self.cfg.waiters.any();
            if waiting {
                for (slot, q) in queues.iter_mut().zip(self.permits.queues()) {
                    *slot = Some(q);
                }
            }
            let engine = &self.cfg.engine;
            engine.release_sampled(std::mem::take(&mut self.permits), self.sample, now);
            if waiting {
                let clock = &self.cfg.clock;
                self.cfg
                    .waiters
                    .released(&queues, &|q| engine.queue_lifo(q, clock.now_ns()));
            }
        }
    }
}

/// Gives up a queue place when dropped while still holding it.
pub(crate) struct TicketGuard {
    pub(crate) cfg: Arc<Config>,
    pub(crate) ticket: Option<QueueTicket>,
}

impl Drop for TicketGuard {
    fn drop(&mut self) {
        if let Some(t) = self.ticket.take() {
            self.cfg.engine.abandon(t, self.cfg.clock.now_ns());
        }
    }
}

pin_project! {
    /// The response body: the inner service's, holding the request's concurrency permits until
    /// it ends (last frame, error) or is dropped; or the layer's own short answer.
    pub struct WeirBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        // A body that holds nothing, the common case: inline, so that a response of axum's
        // `Body` stays as small as the inner one (128 bytes, moved without a `memcpy` call).
        Plain { #[pin] body: B },
        Other { other: Pin<Box<Other<B>>> },
    }
}

pin_project! {
    #[project = OtherProj]
    enum Other<B> {
        Held { #[pin] body: B, guard: Option<Box<PermitGuard>> },
        Full { data: Option<Bytes> },
    }
}

impl<B> WeirBody<B> {
    pub(crate) fn inner(body: B, guard: Option<Box<PermitGuard>>) -> WeirBody<B> {
        let kind = match guard {
            None => Kind::Plain { body },
            guard => Kind::Other {
                other: Box::pin(Other::Held { body, guard }),
            },
        };
        WeirBody { kind }
    }

    pub(crate) fn full(data: &'static str) -> WeirBody<B> {
        let data = Some(Bytes::from_static(data.as_bytes()));
        WeirBody {
            kind: Kind::Other {
                other: Box::pin(Other::Full { data }),
            },
        }
    }

    /// The inner body or the short answer.
    fn part(&self) -> Part<'_, B> {
        match &self.kind {
            Kind::Plain { body } => Part::Body(body),
            Kind::Other { other } => match &**other {
                Other::Held { body, .. } => Part::Body(body),
                Other::Full { data } => Part::Full(data),
            },
        }
    }

    /// Whether this body still holds concurrency permits.
    pub fn holds_permits(&self) -> bool {
        match &self.kind {
            Kind::Other { other } => matches!(&**other, Other::Held { guard: Some(_), .. }),
            Kind::Plain { .. } => false,
        }
    }
}

enum Part<'a, B> {
    Body(&'a B),
    Full(&'a Option<Bytes>),
}

impl<B> Body for WeirBody<B>
where
    B: Body,
    B::Data: From<Bytes>,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let other = match self.project().kind.project() {
            KindProj::Plain { body } => return body.poll_frame(cx),
            KindProj::Other { other } => other.as_mut().project(),
        };
        match other {
            OtherProj::Held { body, guard } => {
                let frame = ready!(body.poll_frame(cx));
                if matches!(frame, None | Some(Err(_))) {
                    // End of stream or a failed body: the response is over.
                    guard.take();
                }
                Poll::Ready(frame)
            }
            OtherProj::Full { data } => {
                Poll::Ready(data.take().map(|d| Ok(Frame::data(B::Data::from(d)))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self.part() {
            Part::Body(body) => body.is_end_stream(),
            Part::Full(data) => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self.part() {
            Part::Body(body) => body.size_hint(),
            Part::Full(data) => SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::mem::size_of;

    use super::WeirBody;

    #[test]
    fn a_body_that_holds_nothing_adds_nothing_to_the_response() {
        type Inner = axum::body::Body;
        assert_eq!(
            size_of::<http::Response<WeirBody<Inner>>>(),
            size_of::<http::Response<Inner>>()
        );
    }
}
