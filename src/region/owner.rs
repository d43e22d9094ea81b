//! Who frees a region: the caller (nginx's zone, a host's mapping), a mapping of this process,
//! or, under loom, the boxed model objects. Shared by every handle on the region (`Arc`), so a
//! second handle (a syncer thread's) keeps the memory alive as long as it lives.

use std::sync::Arc;

/// What frees a handle's region when the last handle on it is dropped.
pub(crate) enum Backing<M> {
    /// The caller owns the region (and keeps it for the handles' life: [`super::Region::new`]).
    Borrowed,
    /// An anonymous mapping of this process, unmapped with the last handle.
    Mapped(#[allow(dead_code)] Arc<super::alloc::Mapping>),
    /// Loom's model objects (tables under loom are boxes of loom atomics).
    #[cfg_attr(not(loom), allow(dead_code))]
    Model(Arc<M>),
}

impl<M> Clone for Backing<M> {
    fn clone(&self) -> Self {
        match self {
            Backing::Borrowed => Backing::Borrowed,
            Backing::Mapped(m) => Backing::Mapped(Arc::clone(m)),
            Backing::Model(m) => Backing::Model(Arc::clone(m)),
        }
    }
}

impl<M> Backing<M> {
    /// The same memory's backing for a handle of another format kept inside it (the exact
    /// log in a table's slot area): a mapping is shared; a model is not (loom builds the log's
    /// own).
    #[cfg_attr(loom, allow(dead_code))]
    pub fn share<N>(&self) -> Backing<N> {
        match self {
            Backing::Mapped(m) => Backing::Mapped(Arc::clone(m)),
            _ => Backing::Borrowed,
        }
    }
}
