//! The names the top-keys summaries record: a limit's key and a client address as text
//! ([`crate::policy::key_text`], addresses exposed as the policy's `[status] clients` says),
//! written into a fixed buffer and truncated to it.

use crate::policy::key_text::KeyText;

/// A sink into a byte buffer that drops what does not fit.
pub(super) struct Text<'a> {
    pub buf: &'a mut [u8],
    pub len: usize,
}

impl KeyText for Text<'_> {
    fn put(&mut self, b: &[u8]) {
        let n = b.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&b[..n]);
        self.len += n;
    }
}

impl<'a> Text<'a> {
    /// Runs `f` on a text over `buf`; the bytes it wrote.
    pub fn write(buf: &'a mut [u8], f: impl FnOnce(&mut Text)) -> &'a [u8] {
        let mut t = Text { buf, len: 0 };
        f(&mut t);
        let Text { buf, len } = t;
        &buf[..len]
    }
}
