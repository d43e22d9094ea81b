//! The peer address a host passes as text. Hand-written for dotted IPv4, what hosts pass
//! nearly always: the standard parser (UTF-8 check, then a general address parser) cost about
//! 250 instructions per request, a fifth of the engine's decision for a hot key.

use std::net::{IpAddr, Ipv4Addr};

/// `text` as an address, exactly as `str::parse::<IpAddr>` reads it: `None` when it is none.
pub(crate) fn parse(text: &[u8]) -> Option<IpAddr> {
    if let Some(v4) = dotted_quad(text) {
        return Some(IpAddr::V4(v4));
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// Four decimal octets of 1 to 3 digits, no leading zero, each at most 255; `None` for
/// anything else (which the standard parser then reads). Accepts only what it accepts.
fn dotted_quad(text: &[u8]) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    let (mut i, mut n, mut digits) = (0, 0u32, 0);
    for &b in text {
        match b {
            b'0'..=b'9' if !(digits == 1 && n == 0) => {
                n = n * 10 + u32::from(b - b'0');
                digits += 1;
                if n > 255 {
                    return None;
                }
            }
            b'.' if digits > 0 && i < 3 => {
                octets[i] = n as u8;
                (i, n, digits) = (i + 1, 0, 0);
            }
            _ => return None, // a leading zero, an empty or fifth octet, another byte
        }
    }
    if digits == 0 || i != 3 {
        return None;
    }
    octets[3] = n as u8;
    Some(Ipv4Addr::from(octets))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn standard(s: &str) -> Option<IpAddr> {
        s.parse().ok()
    }

    #[test]
    fn reads_what_the_standard_parser_reads() {
        let fixed = [
            "192.0.2.1",
            "0.0.0.0",
            "255.255.255.255",
            "256.1.1.1",
            "1.2.3",
            "1.2.3.4.5",
            "01.2.3.4",
            "1.2.3.04",
            "1..2.3",
            ".1.2.3",
            "1.2.3.",
            "1.2.3.4 ",
            "1.2.3.-4",
            "::1",
            "2001:db8::1",
            "::ffff:192.0.2.1",
            "1.2.3.0400",
            "",
            "a.b.c.d",
            "1.2.3.4x",
            "999.999.999.999",
            "00.0.0.0",
            "0.0.0.00",
        ];
        for s in fixed {
            assert_eq!(parse(s.as_bytes()), standard(s), "{s:?}");
        }
        // Every string of up to 8 characters over digits and dots near the edges.
        let alphabet = b"0125.9";
        let mut buf = Vec::new();
        for len in 0..=8u32 {
            for mut n in 0..alphabet.len().pow(len) {
                buf.clear();
                for _ in 0..len {
                    buf.push(alphabet[n % alphabet.len()]);
                    n /= alphabet.len();
                }
                let s = std::str::from_utf8(&buf).unwrap();
                assert_eq!(parse(&buf), standard(s), "{s:?}");
            }
        }
        assert_eq!(parse(b"\xff1.2.3.4"), None);
    }
}
