//! The syntax of an endpoint address, `ip:port` (IPv6 in brackets, with an optional numeric scope
//! id): Envoy's `upstream.address`, the override header's entries, a view's endpoints.
//!
//! Read by hand with exactly the grammar of std's `SocketAddr` parser (a test compares the two on
//! many strings, tricky ones included): std's parser builds the address, with its IPv4, IPv6 and
//! number readers generic over each integer type, ~3.5 KB of the filter's module, which only needs
//! a yes or no. Every reader leaves the cursor where it was when it fails, as std's do.

/// Is `s` an `ip:port` address (at most 64 bytes)?
pub fn is_endpoint_address(s: &str) -> bool {
    let mut r = Reader { bytes: s.as_bytes(), at: 0 };
    let host = if r.eat(b'[') {
        r.ipv6() && (!r.eat(b'%') || r.number(10, usize::MAX, u64::from(u32::MAX), true)) && r.eat(b']')
    } else {
        r.ipv4()
    };
    s.len() <= 64 && host && r.eat(b':') && r.number(10, usize::MAX, u64::from(u16::MAX), true) && r.at == s.len()
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn eat(&mut self, byte: u8) -> bool {
        let next = self.bytes.get(self.at) == Some(&byte);
        self.at += usize::from(next);
        next
    }

    /// 1 to `max_digits` digits of `radix` worth at most `max`; with more than one digit, a leading
    /// zero only if `zero_prefix`.
    fn number(&mut self, radix: u32, max_digits: usize, max: u64, zero_prefix: bool) -> bool {
        let start = self.at;
        let mut value = 0u64;
        while let Some(digit) = self.bytes.get(self.at).and_then(|b| char::from(*b).to_digit(radix)) {
            value = value * u64::from(radix) + u64::from(digit);
            self.at += 1;
            if self.at - start > max_digits || value > max {
                self.at = start;
                return false;
            }
        }
        let digits = self.at - start;
        let ok = digits > 0 && (zero_prefix || digits == 1 || self.bytes[start] != b'0');
        if !ok {
            self.at = start;
        }
        ok
    }

    /// Four decimal octets (0..=255, no leading zeros) separated by dots.
    fn ipv4(&mut self) -> bool {
        let start = self.at;
        let ok = (0..4).all(|i| (i == 0 || self.eat(b'.')) && self.number(10, 3, 255, false));
        if !ok {
            self.at = start;
        }
        ok
    }

    /// Up to `limit` colon-separated groups of 1 to 4 hex digits; an IPv4 address counts as two
    /// and ends them (only where two groups are left). How many were read, and whether the last
    /// was an IPv4 address.
    fn groups(&mut self, limit: usize) -> (usize, bool) {
        for i in 0..limit {
            let before = self.at;
            if i + 1 < limit {
                if (i == 0 || self.eat(b':')) && self.ipv4() {
                    return (i + 2, true);
                }
                self.at = before;
            }
            if !((i == 0 || self.eat(b':')) && self.number(16, 4, 0xffff, true)) {
                self.at = before;
                return (i, false);
            }
        }
        (limit, false)
    }

    /// Eight groups, or fewer with one `::` standing for at least one group of zeros (an IPv4
    /// address only at the end).
    fn ipv6(&mut self) -> bool {
        let start = self.at;
        let (head, head_ipv4) = self.groups(8);
        if head == 8 {
            return true;
        }
        if head_ipv4 || !(self.eat(b':') && self.eat(b':')) {
            self.at = start;
            return false;
        }
        self.groups(7 - head);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn std_says(s: &str) -> bool {
        s.len() <= 64 && s.parse::<SocketAddr>().is_ok()
    }

    #[test]
    fn addresses_and_non_addresses() {
        for good in
            ["127.0.0.1:8080", "0.0.0.0:0", "[2001:db8::1]:443", "[::]:80", "[::ffff:10.0.0.1]:80", "[fe80::1%2]:80"]
        {
            assert!(is_endpoint_address(good), "{good}");
        }
        for bad in ["127.0.0.1", "host:80", "127.0.0.1:99999", "", ":80", "1.2.3.4:80,5.6.7.8:80", "01.2.3.4:80"] {
            assert!(!is_endpoint_address(bad), "{bad}");
        }
    }

    #[test]
    fn agrees_with_std_on_tricky_addresses() {
        let cases = [
            "1.2.3.4:80",
            "1.2.3.4:080",
            "1.2.3.4:000000000080",
            "1.2.3.4:65535",
            "1.2.3.4:65536",
            "1.2.3.4:+80",
            "1.2.3.4:",
            "1.2.3.04:80",
            "1.2.3.0:80",
            "1.2.3.255:80",
            "1.2.3.256:80",
            "1.2.3.1000:80",
            "1.2.3:80",
            "1.2.3.4.5:80",
            "1.2.3.4 :80",
            " 1.2.3.4:80",
            "1..3.4:80",
            "[::1]:80",
            "[::1]80",
            "[::1]:",
            "[::1:80",
            "::1:80",
            "[1:2:3:4:5:6:7:8]:80",
            "[1:2:3:4:5:6:7:8:9]:80",
            "[1:2:3:4:5:6:7::]:80",
            "[::2:3:4:5:6:7:8]:80",
            "[1::8]:80",
            "[1:::8]:80",
            "[1::2::3]:80",
            "[:1::2]:80",
            "[1::2:]:80",
            "[12345::]:80",
            "[abcd::EF01]:80",
            "[g::1]:80",
            "[::1.2.3.4]:80",
            "[1:2:3:4:5:6:1.2.3.4]:80",
            "[1:2:3:4:5:6:7:1.2.3.4]:80",
            "[1.2.3.4::]:80",
            "[1:2:3:4:5:1.2.3.4]:80",
            "[::1.2.3]:80",
            "[::1.2.3.4.5]:80",
            "[::01.2.3.4]:80",
            "[::1%]:80",
            "[::1%0]:80",
            "[::1%4294967295]:80",
            "[::1%4294967296]:80",
            "[::1%x]:80",
            "[::%1]:80",
            "[1:2:3:4:5:6:7::8]:80",
            "[::0:0:0:0:0:0:0]:80",
            "[0:0:0:0:0:0:0::]:80",
            "[::ffff:1.2.3.4:5]:80",
            "[1:2:3:4:5:6::1.2.3.4]:80",
            "[1:2:3:4:5::1.2.3.4]:80",
            "[00000::1]:80",
            "[0000::1]:80",
        ];
        for s in cases {
            assert_eq!(is_endpoint_address(s), std_says(s), "{s}");
        }
    }

    #[test]
    fn agrees_with_std_on_random_strings() {
        let mut rng = tailweight_math::rng::Rng::new(9);
        let pieces =
            ["1", "0", "25", "255", "256", "ff", "ffff", "1ffff", ".", ":", "::", "[", "]", "%", "7", "80", "a"];
        for _ in 0..200_000 {
            let n = 1 + rng.below(12);
            let s: String = (0..n).map(|_| pieces[rng.below(pieces.len())]).collect();
            assert_eq!(is_endpoint_address(&s), std_says(&s), "{s}");
            let bracketed = format!("[{s}]:80");
            assert_eq!(is_endpoint_address(&bracketed), std_says(&bracketed), "{bracketed}");
            let with_port = format!("{s}:80");
            assert_eq!(is_endpoint_address(&with_port), std_says(&with_port), "{with_port}");
        }
        // IPv4 shapes: four octets (some out of range or zero-prefixed), a port (some out of range).
        let octets = ["0", "1", "25", "255", "256", "01", "1000", "", "ff"];
        let separators = [".", ".", ".", ":", ".."];
        let ports = ["80", "0", "65535", "65536", "080", "", "8a"];
        for _ in 0..50_000 {
            let mut s = String::new();
            for i in 0..4 {
                if i > 0 {
                    s.push_str(separators[rng.below(separators.len())]);
                }
                s.push_str(octets[rng.below(octets.len())]);
            }
            s = format!("{s}:{}", ports[rng.below(ports.len())]);
            assert_eq!(is_endpoint_address(&s), std_says(&s), "{s}");
        }
    }
}
