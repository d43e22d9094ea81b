//! Opening inputs (files, gzip, stdin) and splitting them into lines without a copy per line.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Counts the bytes read from the underlying file (compressed bytes for gzip), for progress.
pub struct Counting<R> {
    inner: R,
    count: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Relaxed);
        Ok(n)
    }
}

/// Opens `path` (`-` = stdin); gzip is detected by its magic bytes, not by the name.
/// Returns the reader and the size on disk when known.
pub fn open(path: &str, count: Arc<AtomicU64>) -> io::Result<(Box<dyn Read>, Option<u64>)> {
    let (raw, size): (Box<dyn Read>, Option<u64>) = if path == "-" {
        (Box::new(io::stdin().lock()), None)
    } else {
        let f = File::open(path)?;
        let size = f.metadata().ok().map(|m| m.len());
        (Box::new(f), size)
    };
    let mut br = BufReader::with_capacity(1 << 16, Counting { inner: raw, count });
    let head = br.fill_buf()?;
    if head.len() >= 2 && head[0] == 0x1f && head[1] == 0x8b {
        // MultiGzDecoder: rotated logs are often several gzip members concatenated.
        Ok((Box::new(flate2::bufread::MultiGzDecoder::new(br)), size))
    } else {
        Ok((Box::new(br), size))
    }
}

/// One line from [`LineReader::next_line`].
#[derive(Debug, PartialEq, Eq)]
pub enum Line<'a> {
    /// A line, without its `\n` / `\r\n`.
    Text(&'a [u8]),
    /// A line longer than the reader's maximum: read past, never held whole. `head` is its
    /// beginning (for messages), `len` its length.
    TooLong { head: &'a [u8], len: u64 },
}

/// Bytes of an overlong line kept for messages.
const HEAD: usize = 160;

/// Splits a reader into lines (without `\n` / `\r\n`) inside one buffer that grows to at
/// most the longest line kept plus two bytes: memory is bounded by the maximum line length,
/// whatever the input (a gigabyte without a newline is one overlong line).
pub struct LineReader<R> {
    r: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
    /// Longest line returned as [`Line::Text`], in bytes (without the line ending).
    max_line: usize,
    /// The beginning of the overlong line being returned.
    head: Vec<u8>,
}

impl<R: Read> LineReader<R> {
    /// Lines longer than `max_line` bytes come back as [`Line::TooLong`].
    pub fn new(r: R, max_line: usize) -> Self {
        LineReader {
            r,
            buf: vec![0; max_line.saturating_add(2).clamp(256, 1 << 20)],
            start: 0,
            end: 0,
            eof: false,
            max_line,
            head: Vec::new(),
        }
    }

    /// Reads more input after `end`; sets `eof` at the end.
    fn fill(&mut self) -> io::Result<()> {
        loop {
            match self.r.read(&mut self.buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            return Ok(());
        }
    }

    /// `buf[s..e]` as a line: text, or too long.
    fn line(&mut self, s: usize, e: usize) -> Line<'_> {
        let line = &self.buf[s..e];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.len() <= self.max_line {
            return Line::Text(line);
        }
        self.head.clear();
        self.head.extend_from_slice(&line[..HEAD.min(line.len())]);
        Line::TooLong {
            head: &self.head,
            len: line.len() as u64,
        }
    }

    /// The rest of an overlong line pending in the buffer: reads up to its `\n` (or the end)
    /// through the buffer, keeping only its head.
    fn skip_long(&mut self) -> io::Result<Line<'_>> {
        let pending = &self.buf[self.start..self.end];
        let mut len = pending.len() as u64;
        self.head.clear();
        self.head
            .extend_from_slice(&pending[..HEAD.min(pending.len())]);
        let mut last = pending.last().copied();
        loop {
            (self.start, self.end) = (0, 0);
            self.fill()?;
            if self.eof {
                break;
            }
            let (n, done) = match memchr::memchr(b'\n', &self.buf[..self.end]) {
                Some(i) => (i, true),
                None => (self.end, false),
            };
            let more = n.min(HEAD - self.head.len());
            self.head.extend_from_slice(&self.buf[..more]);
            len += n as u64;
            last = n.checked_sub(1).map(|j| self.buf[j]).or(last);
            if done {
                self.start = n + 1;
                break;
            }
        }
        if last == Some(b'\r') {
            len -= 1; // the `\r` of `\r\n`
        }
        Ok(Line::TooLong {
            head: &self.head,
            len,
        })
    }

    pub fn next_line(&mut self) -> io::Result<Option<Line<'_>>> {
        let (s, e) = loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[self.start..self.end]) {
                let s = self.start;
                self.start += i + 1;
                break (s, s + i);
            }
            // No `\n` in the pending bytes: are they already too long a line (`\r` aside)?
            if self.end - self.start > self.max_line.saturating_add(1) {
                return self.skip_long().map(Some);
            }
            if self.eof {
                if self.start < self.end {
                    let s = self.start;
                    self.start = self.end;
                    break (s, self.end);
                }
                return Ok(None);
            }
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.end == self.buf.len() {
                // Full of one partial line, at most max_line + 1 bytes: room to tell.
                let n = (self.buf.len() * 2).min(self.max_line.saturating_add(2));
                self.buf.resize(n, 0);
            }
            self.fill()?;
        };
        Ok(Some(self.line(s, e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every line of `data`: its text, or the length of an overlong line.
    fn lines(data: &[u8], max_line: usize, buf: usize) -> Vec<Result<Vec<u8>, u64>> {
        let mut r = LineReader::new(data, max_line);
        r.buf = vec![0; buf]; // force growth and compaction
        let mut out = vec![];
        while let Some(l) = r.next_line().unwrap() {
            out.push(match l {
                Line::Text(t) => Ok(t.to_vec()),
                Line::TooLong { head, len } => {
                    assert!(head.len() == HEAD.min(len as usize));
                    Err(len)
                }
            });
            assert!(r.buf.len() <= (max_line + 2).max(buf), "{}", r.buf.len());
        }
        out
    }

    #[test]
    fn splits_lines() {
        assert_eq!(
            lines(b"a\r\nbb\n\nlast", 100, 2),
            vec![
                Ok(b"a".to_vec()),
                Ok(b"bb".to_vec()),
                Ok(vec![]),
                Ok(b"last".to_vec())
            ]
        );
    }

    #[test]
    fn overlong_lines_are_skipped_within_the_bound() {
        let long = vec![b'x'; 1000];
        let mut data = b"ok\n".to_vec();
        data.extend_from_slice(&long);
        data.extend_from_slice(b"\r\nfits\r\n12345\n123456\n");
        data.extend_from_slice(&long);
        let want = vec![
            Ok(b"ok".to_vec()),
            Err(1000),
            Ok(b"fits".to_vec()),
            Ok(b"12345".to_vec()),
            Err(6),
            Err(1000),
        ];
        for buf in [2, 7, 16, 999, 1000, 1001, 1002, 4096] {
            assert_eq!(lines(&data, 5, buf), want, "{buf}");
        }
        // Exactly at the maximum, with either line ending.
        assert_eq!(
            lines(b"12345\r\n12345", 5, 2),
            vec![Ok(b"12345".to_vec()), Ok(b"12345".to_vec())]
        );
    }
}
