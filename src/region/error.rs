//! Why a region could not be created or attached.

/// Why a region could not be created or attached (the messages say what to do about it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegionError {
    TooSmall {
        bytes: usize,
        minimum: usize,
    },
    Misaligned {
        align: usize,
    },
    /// The region holds something that is not this format (zero bytes, or another format).
    NotATable,
    /// The region holds this format in another layout version (its magic's version byte, or
    /// its version word).
    LayoutVersion {
        found: u64,
        expected: u64,
    },
    SizeChanged {
        created: u64,
        now: u64,
    },
    SchemaChanged {
        created: u64,
        now: u64,
    },
    /// 16-byte compare-exchange is not lock-free on this CPU; a shared table would be unsafe.
    NoLockFree128,
    Alloc {
        bytes: usize,
    },
}

impl std::fmt::Display for RegionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RegionError::TooSmall { bytes, minimum } => {
                write!(f, "region of {bytes} bytes is too small; a table needs at least {minimum}")
            }
            RegionError::Misaligned { align } => {
                write!(f, "region must be aligned to {align} bytes")
            }
            RegionError::NotATable => f.write_str("region does not hold a weir table"),
            RegionError::LayoutVersion { found, expected } => write!(
                f,
                "region holds a table of layout version {found}, this build uses {expected}; restart instead of reloading"
            ),
            RegionError::SizeChanged { created, now } => write!(
                f,
                "region was created with {created} bytes and is now {now} bytes; a zone's size cannot change on reload"
            ),
            RegionError::SchemaChanged { created, now } => write!(
                f,
                "region was created for schema {created:#x}, now asked for {now:#x} (the zone's algorithm or key changed); use a new zone name or restart"
            ),
            RegionError::NoLockFree128 => f.write_str(
                "this CPU has no lock-free 16-byte compare-exchange (x86-64: cmpxchg16b), so weir refuses shared-memory zones here (a lock would protect one process only); give the machine or VM a CPU model with cmpxchg16b, or use in-process tables",
            ),
            RegionError::Alloc { bytes } => write!(f, "could not allocate {bytes} bytes"),
        }
    }
}

impl std::error::Error for RegionError {}
