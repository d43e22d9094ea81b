//! Reading the files a policy depends on with a size cap: the policy itself and the PEM files
//! it names (`tls_ca_file`, `tls_cert_file`, `tls_key_file`). A file is read through a reader
//! that stops one byte past the cap, so `/dev/zero`, a huge file or one that grows while it is
//! read costs at most the cap in memory, in `weir check`, `nginx -t`, a reload in the nginx
//! master and `caddy validate` alike.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Largest policy file read (a policy with 100,000 limits is about 10 MB).
pub const MAX_POLICY_BYTES: u64 = 64 << 20;
/// Largest PEM file a policy names (the whole Mozilla CA bundle is about 220 KB).
pub const MAX_PEM_BYTES: u64 = 1 << 20;

/// Why a file was not read.
#[derive(Debug)]
pub enum FileError {
    Io(io::Error),
    /// Not a regular file (a device, a FIFO, a directory, a socket): what it is.
    NotRegular(&'static str),
    /// Longer than the cap (bytes).
    TooLarge(u64),
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileError::Io(e) => e.fmt(f),
            FileError::NotRegular(what) => write!(f, "it is {what}, not a regular file"),
            FileError::TooLarge(cap) => write!(f, "it is larger than {}", size(*cap)),
        }
    }
}

/// `n` bytes for people: `64 MiB`, `1 MiB`, `512 KiB`, `100 bytes`.
fn size(n: u64) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

/// What a file type is, in words.
fn kind(t: std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else {
        "a special file"
    }
}

/// The bytes of `r`, at most `cap` of them: `TooLarge` when there are more.
fn read_capped(r: impl Read, cap: u64) -> Result<Vec<u8>, FileError> {
    let mut buf = Vec::new();
    r.take(cap.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(FileError::Io)?;
    if buf.len() as u64 > cap {
        return Err(FileError::TooLarge(cap));
    }
    Ok(buf)
}

/// The contents of the regular file `path`, at most `cap` bytes. Opened without blocking (a
/// FIFO without a writer is refused, not waited on) and checked on the open file.
pub fn read_regular(path: &Path, cap: u64) -> Result<Vec<u8>, FileError> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(FileError::Io)?;
    let meta = f.metadata().map_err(FileError::Io)?;
    if !meta.file_type().is_file() {
        return Err(FileError::NotRegular(kind(meta.file_type())));
    }
    if meta.len() > cap {
        return Err(FileError::TooLarge(cap));
    }
    read_capped(f, cap)
}

/// The contents of the policy file `path`, at most [`MAX_POLICY_BYTES`]. Any readable file
/// (`/dev/stdin`, a pipe) is read, up to the cap.
pub fn read_policy(path: &Path) -> Result<Vec<u8>, FileError> {
    let f = File::open(path).map_err(FileError::Io)?;
    let meta = f.metadata().map_err(FileError::Io)?;
    if meta.is_dir() {
        return Err(FileError::NotRegular(kind(meta.file_type())));
    }
    if meta.is_file() && meta.len() > MAX_POLICY_BYTES {
        return Err(FileError::TooLarge(MAX_POLICY_BYTES));
    }
    read_capped(f, MAX_POLICY_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_stop_at_the_cap() {
        let e = read_regular(Path::new("/dev/zero"), 10).unwrap_err();
        assert_eq!(
            e.to_string(),
            "it is a character device, not a regular file"
        );
        let e = read_policy(Path::new("/dev/zero")).unwrap_err();
        assert_eq!(e.to_string(), "it is larger than 64 MiB");
        let e = read_regular(Path::new("/"), 10).unwrap_err();
        assert_eq!(e.to_string(), "it is a directory, not a regular file");
        assert!(matches!(
            read_regular(Path::new("/nonexistent/x"), 10),
            Err(FileError::Io(_))
        ));
        let r = read_capped(&b"0123456789"[..], 10).unwrap();
        assert_eq!(r.len(), 10);
        assert!(matches!(
            read_capped(&b"0123456789x"[..], 10),
            Err(FileError::TooLarge(10))
        ));
        assert_eq!(size(MAX_PEM_BYTES), "1 MiB");
        assert_eq!(size(1536), "1536 bytes");
    }
}
