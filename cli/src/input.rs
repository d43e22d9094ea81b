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

/// Splits a reader into lines (without `\n` / `\r\n`) inside one growing buffer.
pub struct LineReader<R> {
    r: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
}

impl<R: Read> LineReader<R> {
    pub fn new(r: R) -> Self {
        LineReader {
            r,
            buf: vec![0; 1 << 20],
            start: 0,
            end: 0,
            eof: false,
        }
    }

    pub fn next_line(&mut self) -> io::Result<Option<&[u8]>> {
        let (s, e) = loop {
            if let Some(i) = memchr::memchr(b'\n', &self.buf[self.start..self.end]) {
                let s = self.start;
                self.start += i + 1;
                break (s, s + i);
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
                let n = self.buf.len() * 2;
                self.buf.resize(n, 0);
            }
            match self.r.read(&mut self.buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        };
        let line = &self.buf[s..e];
        Ok(Some(line.strip_suffix(b"\r").unwrap_or(line)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines() {
        let data = b"a\r\nbb\n\nlast".to_vec();
        let mut r = LineReader::new(&data[..]);
        r.buf = vec![0; 2]; // force growth and compaction
        let mut out = vec![];
        while let Some(l) = r.next_line().unwrap() {
            out.push(l.to_vec());
        }
        assert_eq!(
            out,
            vec![b"a".to_vec(), b"bb".to_vec(), vec![], b"last".to_vec()]
        );
    }
}
