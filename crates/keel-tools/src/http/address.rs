//! The address rule: unless `http_allow_private` is set, `http_get` never connects to a
//! loopback, private, link-local, multicast, unspecified or otherwise non-public address.
//!
//! The rule is checked on the address actually connected to: a URL whose host is an IP literal
//! (including the odd forms `2130706433`, `0x7f000001`, `0177.0.0.1`, `0`, which the URL parser
//! turns into plain addresses) is checked before the request and on every redirect hop; a host
//! name is checked by [`GuardedResolver`] after DNS, so a public-looking name that resolves to
//! 127.0.0.1 is refused too, on the first request and after any redirect.

use std::error::Error as StdError;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// The setting that lifts the rule, as the user writes it.
pub(super) const OPT_IN: &str = "[tools] http_allow_private = true";

/// The kind of non-public address `ip` is, or `None` for a public address.
pub(super) fn non_public_kind(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_kind(v4),
        IpAddr::V6(v6) => v6_kind(v6),
    }
}

fn v4_kind(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        _ if ip.is_loopback() => "loopback",
        (0, _, _) => "unspecified",
        (10, _, _) | (192, 168, _) => "private",
        (172, 16..=31, _) => "private",
        (100, 64..=127, _) => "shared (carrier-grade NAT)",
        (169, 254, _) => "link-local",
        (192, 0, 0) => "reserved",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "documentation",
        (198, 18..=19, _) => "benchmarking",
        _ if ip.is_broadcast() => "broadcast",
        (224..=239, _, _) => "multicast",
        (240..=255, _, _) => "reserved",
        _ => return None,
    })
}

fn v6_kind(ip: Ipv6Addr) -> Option<&'static str> {
    if let Some(v4) = embedded_v4(ip) {
        return v4_kind(v4);
    }
    let first = ip.segments()[0];
    Some(match first {
        _ if ip.is_loopback() => "loopback",
        _ if ip.is_unspecified() => "unspecified",
        0xfc00..=0xfdff => "private (unique local)",
        0xfe80..=0xfebf => "link-local",
        0xfec0..=0xfeff => "site-local",
        0xff00..=0xffff => "multicast",
        0x2001 if ip.segments()[1] == 0x0db8 => "documentation",
        _ => return None,
    })
}

/// The IPv4 address an IPv6 address carries: IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible
/// (`::a.b.c.d`), NAT64 (`64:ff9b::a.b.c.d`) or 6to4 (`2002:aabb:ccdd::`).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = || Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(low()),
        // `::` and `::1` are IPv6's own unspecified and loopback addresses.
        [0, 0, 0, 0, 0, 0, _, _] if !ip.is_loopback() && !ip.is_unspecified() => Some(low()),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(low()),
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::new(
            (hi >> 8) as u8,
            hi as u8,
            (lo >> 8) as u8,
            lo as u8,
        )),
        _ => None,
    }
}

/// A refused address: why, in words for the model, naming the rule and the opt-in.
#[derive(Debug)]
pub(super) struct NonPublicAddress {
    /// The host as the URL or the redirect named it.
    pub host: String,
    /// The address it is or resolved to.
    pub ip: IpAddr,
    /// What kind of address that is ("loopback", "private", ...).
    pub kind: &'static str,
}

impl fmt::Display for NonPublicAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let article = if self.kind.starts_with(['a', 'e', 'i', 'o', 'u']) {
            "an"
        } else {
            "a"
        };
        let kind = self.kind;
        let target = if self.host == self.ip.to_string() {
            format!("{} is {article} {kind} address", self.host)
        } else {
            format!(
                "{} resolves to {}, {article} {kind} address",
                self.host, self.ip
            )
        };
        write!(
            f,
            "{target}; http_get refuses loopback, private, link-local, multicast and \
             unspecified addresses unless `{OPT_IN}` is set in keel.toml"
        )
    }
}

impl StdError for NonPublicAddress {}

/// Which addresses `http_get` may connect to: public ones only, unless private ones are
/// allowed.
#[derive(Clone, Debug)]
pub(super) struct AddressRule {
    allow_private: bool,
    /// Addresses tests treat as public, to stand a "public" server on a loopback address.
    treated_as_public: Vec<IpAddr>,
}

impl AddressRule {
    /// The rule: with `allow_private`, every address may be connected to.
    pub(super) fn new(allow_private: bool) -> Self {
        AddressRule {
            allow_private,
            treated_as_public: Vec::new(),
        }
    }

    /// The rule, but with `ip` counted as public (for tests).
    #[cfg(test)]
    pub(super) fn treating_as_public(mut self, ip: IpAddr) -> Self {
        self.treated_as_public.push(ip);
        self
    }

    /// True when every address may be connected to.
    pub(super) fn allows_private(&self) -> bool {
        self.allow_private
    }

    /// What kind of refused address `ip` is, or `None` when it may be connected to.
    fn refused_kind(&self, ip: IpAddr) -> Option<&'static str> {
        if self.allow_private || self.treated_as_public.contains(&ip) {
            return None;
        }
        non_public_kind(ip)
    }

    /// The refusal for `url` when its host is a refused IP literal; `None` for a host name
    /// (checked after DNS by [`GuardedResolver`]) or an address that may be connected to.
    pub(super) fn literal_refusal(&self, url: &Url) -> Option<NonPublicAddress> {
        if url.domain().is_some() {
            return None;
        }
        // The parser has already turned every IPv4 form into dotted decimal; IPv6 keeps brackets.
        let literal = url
            .host_str()?
            .trim_start_matches('[')
            .trim_end_matches(']');
        let ip: IpAddr = literal.parse().ok()?;
        let kind = self.refused_kind(ip)?;
        Some(NonPublicAddress {
            host: ip.to_string(),
            ip,
            kind,
        })
    }

    /// The addresses among `found` that may be connected to, or the refusal of the first one
    /// when there are none.
    fn permitted(
        &self,
        host: &str,
        found: Vec<SocketAddr>,
    ) -> Result<Vec<SocketAddr>, NonPublicAddress> {
        let first = found.first().map(SocketAddr::ip);
        let permitted: Vec<SocketAddr> = found
            .into_iter()
            .filter(|addr| self.refused_kind(addr.ip()).is_none())
            .collect();
        match first {
            Some(ip) if permitted.is_empty() => Err(NonPublicAddress {
                host: host.to_string(),
                ip,
                kind: self.refused_kind(ip).unwrap_or("non-public"),
            }),
            _ => Ok(permitted),
        }
    }
}

/// A DNS resolver that drops every refused address from the answer and fails, saying why,
/// when none is left. reqwest connects only to the addresses it returns.
pub(super) struct GuardedResolver {
    /// The rule the answers are held to.
    pub rule: AddressRule,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_string();
        let rule = self.rule.clone();
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            rule.permitted(&host, found)
                .map(|addrs| Box::new(addrs.into_iter()) as Addrs)
                .map_err(|refused| Box::new(refused) as _)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(ip: &str) -> Option<&'static str> {
        non_public_kind(ip.parse().unwrap())
    }

    #[test]
    fn non_public_ranges_are_named() {
        for (ip, expected) in [
            ("127.0.0.1", "loopback"),
            ("127.1.2.3", "loopback"),
            ("0.0.0.0", "unspecified"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("100.64.0.1", "shared (carrier-grade NAT)"),
            ("169.254.169.254", "link-local"),
            ("224.0.0.1", "multicast"),
            ("255.255.255.255", "broadcast"),
            ("192.0.2.7", "documentation"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fd00::1", "private (unique local)"),
            ("fe80::1", "link-local"),
            ("ff02::1", "multicast"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:169.254.169.254", "link-local"),
            ("::10.0.0.1", "private"),
            ("64:ff9b::7f00:1", "loopback"),
            ("2002:7f00:1::", "loopback"),
            ("2001:db8::1", "documentation"),
        ] {
            assert_eq!(kind(ip), Some(expected), "{ip}");
        }
    }

    #[test]
    fn public_addresses_pass() {
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:1.1.1.1",
        ] {
            assert_eq!(kind(ip), None, "{ip}");
        }
    }

    #[test]
    fn odd_literal_forms_are_plain_addresses_to_the_rule() {
        for raw in [
            "http://2130706433/",
            "http://0x7f000001/",
            "http://0177.0.0.1/",
            "http://0/",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://169.254.169.254/latest/meta-data",
        ] {
            let url = Url::parse(raw).unwrap();
            assert!(
                AddressRule::new(false).literal_refusal(&url).is_some(),
                "{raw}"
            );
            assert!(
                AddressRule::new(true).literal_refusal(&url).is_none(),
                "{raw}"
            );
        }
        let named = Url::parse("http://localhost/").unwrap();
        let rule = AddressRule::new(false);
        assert!(rule.literal_refusal(&named).is_none(), "names wait for DNS");
    }

    #[test]
    fn resolved_answers_keep_only_public_addresses() {
        let addr = |s: &str| -> SocketAddr { s.parse().unwrap() };
        let rule = AddressRule::new(false);
        let mixed = vec![addr("127.0.0.1:0"), addr("1.1.1.1:0")];
        assert_eq!(rule.permitted("x", mixed).unwrap(), vec![addr("1.1.1.1:0")]);
        let refused = rule
            .permitted("evil.test", vec![addr("127.0.0.1:0")])
            .unwrap_err();
        let text = refused.to_string();
        assert!(
            text.starts_with("evil.test resolves to 127.0.0.1, a loopback address"),
            "{text}"
        );
        assert!(text.contains(OPT_IN), "{text}");
    }
}
