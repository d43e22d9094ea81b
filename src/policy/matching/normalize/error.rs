//! Why a target is refused: [`UriError`], with the offset and the byte at fault.

use super::*;

/// Why a request target was refused. Offsets are byte offsets into the input
/// the called function was given (for [`normalize_target`] and
/// [`split_target`]: into the whole target).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum UriError {
    /// The target is empty.
    Empty,
    /// The target starts with a byte that begins neither an origin-form path
    /// (`/`) nor an absolute-form scheme (an ASCII letter).
    BadStart { byte: u8 },
    /// A byte that cannot appear in the scheme, or a missing `://`.
    BadScheme { offset: usize, byte: Option<u8> },
    /// A byte that cannot appear in the host, port or IP literal of an
    /// absolute-form target (`byte` is `None` when the target ends inside an
    /// unterminated `[` IP literal).
    BadAuthority { offset: usize, byte: Option<u8> },
    /// The host is empty, only a dot, or contains `..`.
    InvalidHost { offset: usize },
    /// A control byte (0x00..=0x1F), DEL (0x7F) or a space in the target.
    ForbiddenByte { offset: usize, byte: u8 },
    /// A `%` not followed by two hexadecimal digits (`offset` points at `%`).
    InvalidEscape { offset: usize },
    /// `%00` (a decoded NUL byte) in the path.
    EncodedNul { offset: usize },
    /// A `..` segment with no segment left to remove (`offset` points at the
    /// byte that completed the `..` segment, or at the end of the path).
    AboveRoot { offset: usize },
    /// [`normalize_path`] was given a path that does not start with `/`.
    NoLeadingSlash,
    /// The output buffer is shorter than the normalized path. Cannot happen
    /// when the buffer is at least as long as the input.
    OutputTooSmall { capacity: usize },
}

impl UriError {
    pub(super) fn shifted(self, by: usize) -> UriError {
        use UriError::*;
        match self {
            BadScheme { offset, byte } => BadScheme {
                offset: offset + by,
                byte,
            },
            BadAuthority { offset, byte } => BadAuthority {
                offset: offset + by,
                byte,
            },
            InvalidHost { offset } => InvalidHost {
                offset: offset + by,
            },
            ForbiddenByte { offset, byte } => ForbiddenByte {
                offset: offset + by,
                byte,
            },
            InvalidEscape { offset } => InvalidEscape {
                offset: offset + by,
            },
            EncodedNul { offset } => EncodedNul {
                offset: offset + by,
            },
            AboveRoot { offset } => AboveRoot {
                offset: offset + by,
            },
            other => other,
        }
    }
}

pub(super) struct ByteName(Option<u8>);

impl fmt::Display for ByteName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => f.write_str("end of input"),
            Some(b) if b.is_ascii_graphic() => write!(f, "byte 0x{b:02X} ('{}')", b as char),
            Some(b) => write!(f, "byte 0x{b:02X}"),
        }
    }
}

impl fmt::Display for UriError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use UriError::*;
        match *self {
            Empty => f.write_str("empty request target"),
            BadStart { byte } => write!(
                f,
                "request target starts with {}, expected '/' or a URI scheme",
                ByteName(Some(byte))
            ),
            BadScheme { offset, byte } => write!(
                f,
                "invalid absolute-form scheme at offset {offset}: unexpected {} (expected scheme \"://\")",
                ByteName(byte)
            ),
            BadAuthority { offset, byte } => write!(
                f,
                "invalid host or port at offset {offset}: unexpected {}",
                ByteName(byte)
            ),
            InvalidHost { offset } => write!(
                f,
                "invalid host starting at offset {offset}: empty, \".\" or containing \"..\""
            ),
            ForbiddenByte { offset, byte } => write!(
                f,
                "forbidden {} at offset {offset}: control characters, DEL and spaces cannot appear in a request target",
                ByteName(Some(byte))
            ),
            InvalidEscape { offset } => write!(
                f,
                "invalid percent-escape at offset {offset}: '%' must be followed by two hex digits"
            ),
            EncodedNul { offset } => {
                write!(f, "percent-encoded NUL (%00) at offset {offset}")
            }
            AboveRoot { offset } => write!(
                f,
                "\"..\" segment ending at offset {offset} climbs above the root"
            ),
            NoLeadingSlash => f.write_str("path does not start with '/'"),
            OutputTooSmall { capacity } => write!(
                f,
                "output buffer of {capacity} bytes is too small for the normalized path"
            ),
        }
    }
}

impl std::error::Error for UriError {}
