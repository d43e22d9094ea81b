//! IP networks: CIDR prefixes and sets of them (trusted proxies, `client_ip` tests, key prefixes).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An IP network (address + prefix length), host bits zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpNet {
    pub(super) addr: IpAddr,
    pub(super) prefix: u8,
}

impl IpNet {
    /// Parse `10.0.0.0/8`, `2001:db8::/32` or a bare address (a /32 or /128).
    /// Host bits must be zero (`10.0.0.1/8` is rejected, it is almost always a
    /// typo).
    pub fn parse(s: &str) -> Result<IpNet, String> {
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = a.trim().parse().map_err(|_| {
            format!("invalid CIDR {s:?}; expected an address like \"10.0.0.0/8\", \"2001:db8::/32\" or \"192.0.2.7\"")
        })?;
        let addr = addr.to_canonical();
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            None => max,
            Some(p) => match p.trim().parse::<u8>() {
                Ok(n) if n <= max => n,
                _ => {
                    return Err(format!(
                        "invalid prefix length in {s:?}; expected 0..={max}"
                    ))
                }
            },
        };
        let masked = mask_ip(addr, prefix);
        if masked != addr {
            return Err(format!(
                "CIDR {s:?} has host bits set; did you mean \"{masked}/{prefix}\"?"
            ));
        }
        Ok(IpNet { addr, prefix })
    }

    /// Network address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// Prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Is `ip` inside this network? IPv4-mapped IPv6 addresses count as IPv4.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        ip.is_ipv4() == self.addr.is_ipv4() && mask_ip(ip, self.prefix) == self.addr
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// Zero all but the first `prefix` bits of `ip` (prefix clamped to the
/// family's width).
pub fn mask_ip(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let m = mask32(prefix);
            IpAddr::V4(Ipv4Addr::from(u32::from(v4) & m))
        }
        IpAddr::V6(v6) => {
            let m = mask128(prefix);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & m))
        }
    }
}

#[inline]
pub(super) fn mask32(prefix: u8) -> u32 {
    match prefix {
        0 => 0,
        p if p >= 32 => u32::MAX,
        p => u32::MAX << (32 - p),
    }
}

#[inline]
pub(super) fn mask128(prefix: u8) -> u128 {
    match prefix {
        0 => 0,
        p if p >= 128 => u128::MAX,
        p => u128::MAX << (128 - p),
    }
}

/// A set of networks, split by family, tested linearly (policy lists are
/// short), and possibly the local client (`unix:`: a peer without an IP address).
#[derive(Clone, Debug, Default)]
pub struct CidrSet {
    pub(super) v4: Vec<(u32, u32)>,
    pub(super) v6: Vec<(u128, u128)>,
    pub(super) nets: Vec<IpNet>,
    pub(super) local: bool,
}

/// How policies write the local client in address lists (as nginx's `set_real_ip_from unix:`).
pub const LOCAL_CLIENT: &str = "unix:";

impl CidrSet {
    /// Empty set (contains nothing).
    pub fn new() -> CidrSet {
        CidrSet::default()
    }

    /// Add a network.
    pub fn push(&mut self, net: IpNet) {
        match net.addr {
            IpAddr::V4(a) => self.v4.push((u32::from(a), mask32(net.prefix))),
            IpAddr::V6(a) => self.v6.push((u128::from(a), mask128(net.prefix))),
        }
        self.nets.push(net);
    }

    /// Add one list entry: a network as [`IpNet::parse`] reads it, or [`LOCAL_CLIENT`].
    pub fn push_entry(&mut self, entry: &str) -> Result<(), String> {
        if entry.trim() == LOCAL_CLIENT {
            self.local = true;
            return Ok(());
        }
        IpNet::parse(entry).map(|n| self.push(n))
    }

    /// Is the set empty?
    pub fn is_empty(&self) -> bool {
        self.nets.is_empty() && !self.local
    }

    /// Is `client` in the set: an address in one of its networks, or the local client
    /// (`None`) when the set holds `unix:`.
    #[inline]
    pub fn contains_peer(&self, client: Option<IpAddr>) -> bool {
        match client {
            Some(ip) => self.contains(ip),
            None => self.local,
        }
    }

    /// The networks, in insertion order.
    pub fn nets(&self) -> &[IpNet] {
        &self.nets
    }

    /// Is `ip` in any network of the set? IPv4-mapped IPv6 counts as IPv4.
    #[inline]
    pub fn contains(&self, ip: IpAddr) -> bool {
        // As `ip.to_canonical()` then the family's list, with the family tested first (so a
        // caller's loop gets no hoisted conversion).
        match ip {
            IpAddr::V4(a) => self.contains_v4(a),
            IpAddr::V6(a) => match a.to_ipv4_mapped() {
                Some(a) => self.contains_v4(a),
                None => {
                    let a = u128::from(a);
                    self.v6.iter().any(|&(n, m)| a & m == n)
                }
            },
        }
    }

    #[inline]
    pub(crate) fn contains_v4(&self, a: Ipv4Addr) -> bool {
        let a = u32::from(a);
        self.v4.iter().any(|&(n, m)| a & m == n)
    }
}
