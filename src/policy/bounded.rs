//! The engine's view of a host's request with a bound on repeated headers: it reads at most
//! [`MAX_HEADER_VALUES`] values of one header name, so a host whose lookup never runs out
//! (a C callback that always answers) cannot make an evaluation loop forever, and a request
//! with more values than that is refused before anything is charged.

use std::cell::Cell;
use std::net::IpAddr;

use super::request::RequestView;

/// Most values of one header name the engine reads. A request that has more of a header the
/// policy needs is refused ([`super::EvalError::TooManyHeaderValues`]): dropping some would
/// change what the policy sees (the rightmost `X-Forwarded-For` hops, say).
pub const MAX_HEADER_VALUES: usize = 65_536;

/// `view`, answering no header occurrence at or beyond [`MAX_HEADER_VALUES`] and noting
/// whether the host had one.
pub(crate) struct Bounded<'v> {
    view: &'v dyn RequestView,
    overflow: Cell<bool>,
}

impl<'v> Bounded<'v> {
    #[inline]
    pub(crate) fn new(view: &'v dyn RequestView) -> Bounded<'v> {
        Bounded {
            view,
            overflow: Cell::new(false),
        }
    }

    /// Whether some header had more than [`MAX_HEADER_VALUES`] values the engine asked for.
    #[inline]
    pub(crate) fn overflowed(&self) -> bool {
        self.overflow.get()
    }
}

impl RequestView for Bounded<'_> {
    #[inline]
    fn method(&self) -> &[u8] {
        self.view.method()
    }

    #[inline]
    fn target(&self) -> &[u8] {
        self.view.target()
    }

    #[inline]
    fn peer(&self) -> Option<IpAddr> {
        self.view.peer()
    }

    #[inline]
    fn header_nth(&self, lowercase_name: &[u8], nth: usize) -> Option<&[u8]> {
        if nth < MAX_HEADER_VALUES {
            return self.view.header_nth(lowercase_name, nth);
        }
        // One question past the bound tells whether the host has more.
        if nth == MAX_HEADER_VALUES && self.view.header_nth(lowercase_name, nth).is_some() {
            self.overflow.set(true);
        }
        None
    }

    #[inline]
    fn var(&self, index: usize) -> Option<&[u8]> {
        self.view.var(index)
    }

    #[inline]
    fn for_each_header<'s>(&'s self, f: &mut dyn FnMut(&'s [u8], &'s [u8])) -> bool {
        self.view.for_each_header(f)
    }
}
