//! Egress rules: which hosts a program's `http.fetch` may reach, and which
//! addresses no name may lead to.
//!
//! The text forms are the `net=HOST[:PORT]` grant and the host part of a
//! `secret:NAME=HOST[:PORT]` binding. They live here, beside the syscall
//! table, because three places read them and must agree: the control API's
//! grants, `berm.toml` (berm-app, linked into the microVM's PID 1) and the
//! host that enforces them. Nothing here touches the network.

use core::fmt;
use core::str::FromStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Where a request goes, as its URL names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target<'a> {
    /// A DNS name, lowercase, without a trailing dot.
    Name(&'a str),
    /// A literal address.
    Ip(IpAddr),
}

/// The host part of a rule.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HostPattern {
    /// Exactly this DNS name (lowercase).
    Name(String),
    /// `*.SUFFIX`: any name ending in `.SUFFIX`, at any depth; not `SUFFIX`
    /// itself.
    Wildcard(String),
    /// This literal address.
    Ip(IpAddr),
}

/// One `HOST[:PORT]` rule. Without a port it allows the scheme's default
/// port (80 for `http`, 443 for `https`), nothing else.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NetRule {
    /// Which hosts.
    pub host: HostPattern,
    /// Which port, when named.
    pub port: Option<u16>,
}

/// Why a `HOST[:PORT]` rule could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetRuleError {
    /// The rule as written.
    pub rule: String,
    /// What is wrong with it.
    pub problem: String,
}

impl fmt::Display for NetRuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}`: {}; write HOST[:PORT], e.g. api.github.com, *.example.com:8443, 127.0.0.1:8080 or [::1]:8080",
            self.rule, self.problem
        )
    }
}

impl std::error::Error for NetRuleError {}

impl FromStr for NetRule {
    type Err = NetRuleError;

    fn from_str(text: &str) -> Result<NetRule, NetRuleError> {
        let fail = |problem: &str| NetRuleError {
            rule: text.chars().take(300).collect(),
            problem: problem.to_string(),
        };
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let (inside, after) = rest
                .split_once(']')
                .ok_or_else(|| fail("an IPv6 address needs its closing `]`"))?;
            let ip: Ipv6Addr = inside
                .parse()
                .map_err(|_| fail("not an IPv6 address inside `[…]`"))?;
            let port = match after {
                "" => None,
                _ => Some(
                    after
                        .strip_prefix(':')
                        .ok_or_else(|| fail("only `:PORT` may follow `]`"))?,
                ),
            };
            (HostPattern::Ip(IpAddr::V6(ip)), port)
        } else {
            let (host, port) = match text.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (text, None),
            };
            if host.contains(':') {
                return Err(fail("write an IPv6 address in brackets: [::1]:8080"));
            }
            (host_pattern(host).map_err(fail)?, port)
        };
        let port = match port {
            None => None,
            Some(text) => match text.parse::<u16>() {
                Ok(port) if port > 0 && text.bytes().all(|b| b.is_ascii_digit()) => Some(port),
                _ => return Err(fail("the port must be a number from 1 to 65535")),
            },
        };
        if let HostPattern::Ip(ip) = &host
            && port.is_none()
            && let Some(range) = refused_range(*ip)
        {
            return Err(fail(&format!(
                "{ip} is a {range} address: granting one needs its port too (ADDRESS:PORT)"
            )));
        }
        Ok(NetRule { host, port })
    }
}

fn host_pattern(host: &str) -> Result<HostPattern, &'static str> {
    if let Ok(ip) = host.parse::<Ipv4Addr>() {
        return Ok(HostPattern::Ip(IpAddr::V4(ip)));
    }
    let lower = host.to_ascii_lowercase();
    if let Some(suffix) = lower.strip_prefix("*.") {
        check_name(suffix)?;
        if !suffix.contains('.') {
            return Err("a wildcard must cover a domain, not a top-level one (*.example.com)");
        }
        return Ok(HostPattern::Wildcard(suffix.to_string()));
    }
    check_name(&lower)?;
    Ok(HostPattern::Name(lower))
}

/// Whether `name` is a plain DNS name: labels of `a-z0-9-`, 1 to 63 long,
/// not starting or ending with `-`, at most 253 characters in all.
fn check_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("the host is empty");
    }
    if name.len() > 253 {
        return Err("the host is longer than 253 characters");
    }
    for label in name.split('.') {
        let bytes = label.as_bytes();
        if bytes.is_empty() || bytes.len() > 63 {
            return Err("each part of a host name is 1 to 63 characters");
        }
        if !bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        {
            return Err("a host name holds only a-z, 0-9, `-` and `.` (write IDNs in punycode)");
        }
        if bytes[0] == b'-' || bytes[bytes.len() - 1] == b'-' {
            return Err("a part of a host name may not start or end with `-`");
        }
    }
    if name.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err("not a valid IPv4 address");
    }
    Ok(())
}

impl fmt::Display for NetRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            HostPattern::Name(name) => f.write_str(name)?,
            HostPattern::Wildcard(suffix) => write!(f, "*.{suffix}")?,
            HostPattern::Ip(IpAddr::V4(ip)) => write!(f, "{ip}")?,
            HostPattern::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]")?,
        }
        if let Some(port) = self.port {
            write!(f, ":{port}")?;
        }
        Ok(())
    }
}

impl NetRule {
    /// Whether this rule lets a request reach `target` on `port`, where
    /// `default_port` is the URL scheme's. A literal address in a refused
    /// range ([`refused_range`]) is allowed only by a rule naming that
    /// address and that port.
    pub fn allows(&self, target: &Target<'_>, port: u16, default_port: u16) -> bool {
        let port_ok = self.port.unwrap_or(default_port) == port;
        match (&self.host, target) {
            (HostPattern::Name(name), Target::Name(host)) => port_ok && name == host,
            (HostPattern::Wildcard(suffix), Target::Name(host)) => {
                port_ok
                    && host.len() > suffix.len() + 1
                    && host.ends_with(suffix.as_str())
                    && host.as_bytes()[host.len() - suffix.len() - 1] == b'.'
            }
            (HostPattern::Ip(rule), Target::Ip(ip)) => {
                let (rule, ip) = (canonical(*rule), canonical(*ip));
                rule == ip && port_ok && (refused_range(ip).is_none() || self.port == Some(port))
            }
            _ => false,
        }
    }
}

/// The host part of a `secret:NAME=…` binding: where the value may go and over which scheme.
///
/// Without a scheme (`secret:NAME=HOST[:PORT]`, or `https://HOST[:PORT]`) the value goes
/// over HTTPS only, so a binding written as a bare host never sends a secret in cleartext.
/// `http://HOST[:PORT]` names cleartext HTTP explicitly (a local test server, a sidecar on
/// loopback), and then only HTTP: the scheme written is the one allowed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SecretRule {
    /// Which hosts and port.
    pub rule: NetRule,
    /// Written `http://`: the value may go over cleartext HTTP, and not over HTTPS.
    pub cleartext: bool,
}

impl FromStr for SecretRule {
    type Err = NetRuleError;

    fn from_str(text: &str) -> Result<SecretRule, NetRuleError> {
        let (cleartext, host) = match (text.strip_prefix("http://"), text.strip_prefix("https://"))
        {
            (Some(host), _) => (true, host),
            (_, Some(host)) => (false, host),
            _ if text.contains("://") => {
                return Err(NetRuleError {
                    rule: text.chars().take(300).collect(),
                    problem: "a secret's host takes http:// (cleartext, named explicitly), \
                              https:// or no scheme (HTTPS)"
                        .into(),
                });
            }
            _ => (false, text),
        };
        Ok(SecretRule {
            rule: host.parse()?,
            cleartext,
        })
    }
}

impl fmt::Display for SecretRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.cleartext {
            f.write_str("http://")?;
        }
        write!(f, "{}", self.rule)
    }
}

impl SecretRule {
    /// Whether the value may go to `target` on `port` over TLS (`tls`) or not, where
    /// `default_port` is the URL scheme's: the host and port as [`NetRule::allows`] says,
    /// and the scheme the binding names.
    pub fn allows(&self, target: &Target<'_>, port: u16, default_port: u16, tls: bool) -> bool {
        tls != self.cleartext && self.rule.allows(target, port, default_port)
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is; others unchanged.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => ip,
        },
        v4 => v4,
    }
}

/// What a row of [`SPECIAL_PURPOSE`] says of the addresses in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judgement {
    /// Refused: no resolved name may lead there.
    Refused,
    /// Judged by the IPv4 address the IPv6 one carries at this byte offset (IPv4-mapped,
    /// NAT64, 6to4): refused when that address is.
    ByIpv4At(usize),
}

/// One block of IANA's IPv4 or IPv6 special-purpose address registry (RFC 6890 and its
/// updates) that berm refuses, or judges by the IPv4 address inside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecialPurpose {
    /// The block's first address.
    pub network: IpAddr,
    /// Its prefix length.
    pub prefix: u8,
    /// Its name, as refusals print it.
    pub name: &'static str,
    /// What it means for an address in it.
    pub judgement: Judgement,
}

const fn v4(a: u8, b: u8, c: u8, d: u8, prefix: u8, name: &'static str) -> SpecialPurpose {
    SpecialPurpose {
        network: IpAddr::V4(Ipv4Addr::new(a, b, c, d)),
        prefix,
        name,
        judgement: Judgement::Refused,
    }
}

const fn v6(network: u128, prefix: u8, name: &'static str, judgement: Judgement) -> SpecialPurpose {
    SpecialPurpose {
        network: IpAddr::V6(Ipv6Addr::from_bits(network)),
        prefix,
        name,
        judgement,
    }
}

const REFUSED: Judgement = Judgement::Refused;
/// The IPv4 address sits in the last four bytes (IPv4-mapped, NAT64).
const V4_LAST: Judgement = Judgement::ByIpv4At(12);

/// The special-purpose blocks berm refuses, first match wins (so a block precedes any larger
/// one holding it): every block of IANA's registries that is not globally reachable, the
/// documentation and benchmarking blocks, multicast, and the deprecated IPv4-compatible,
/// site-local and 6to4-relay blocks. Blocks IANA lists as globally reachable (AS112, AMT,
/// 192.0.0.9/10, ORCHIDv2 and others inside 2001::/23 excepted: berm refuses that whole
/// block, which also holds Teredo) are not here. The transition blocks that carry an IPv4
/// address are judged by that address.
#[rustfmt::skip]
pub static SPECIAL_PURPOSE: &[SpecialPurpose] = &[
    v4(0, 0, 0, 0, 8, "this-network (0.0.0.0/8)"),
    v4(10, 0, 0, 0, 8, "private (10.0.0.0/8)"),
    v4(100, 64, 0, 0, 10, "carrier-grade NAT (100.64.0.0/10)"),
    v4(127, 0, 0, 0, 8, "loopback (127.0.0.0/8)"),
    v4(169, 254, 0, 0, 16, "link-local and metadata (169.254.0.0/16)"),
    v4(172, 16, 0, 0, 12, "private (172.16.0.0/12)"),
    v4(192, 0, 0, 0, 24, "IETF protocol assignments (192.0.0.0/24)"),
    v4(192, 0, 2, 0, 24, "documentation (192.0.2.0/24)"),
    v4(192, 88, 99, 0, 24, "6to4 relay anycast (192.88.99.0/24)"),
    v4(192, 168, 0, 0, 16, "private (192.168.0.0/16)"),
    v4(198, 18, 0, 0, 15, "benchmarking (198.18.0.0/15)"),
    v4(198, 51, 100, 0, 24, "documentation (198.51.100.0/24)"),
    v4(203, 0, 113, 0, 24, "documentation (203.0.113.0/24)"),
    v4(224, 0, 0, 0, 4, "multicast (224.0.0.0/4)"),
    v4(255, 255, 255, 255, 32, "broadcast (255.255.255.255/32)"),
    v4(240, 0, 0, 0, 4, "reserved (240.0.0.0/4)"),
    v6(0, 128, "unspecified (::)", REFUSED),
    v6(1, 128, "loopback (::1)", REFUSED),
    v6(0xffff << 32, 96, "IPv4-mapped (::ffff:0:0/96)", V4_LAST),
    v6(0, 96, "IPv4-compatible, deprecated (::/96)", REFUSED),
    v6(0x64_ff9b << 96, 96, "NAT64 (64:ff9b::/96)", V4_LAST),
    v6(0x64_ff9b_0001 << 80, 48, "local-use NAT64 (64:ff9b:1::/48)", REFUSED),
    v6(0x0100 << 112, 64, "discard-only (100::/64)", REFUSED),
    v6(0x2001 << 112, 23, "IETF protocol assignments, Teredo (2001::/23)", REFUSED),
    v6(0x2001_0db8 << 96, 32, "documentation (2001:db8::/32)", REFUSED),
    v6(0x2002 << 112, 16, "6to4 (2002::/16)", Judgement::ByIpv4At(2)),
    v6(0x3fff << 112, 20, "documentation (3fff::/20)", REFUSED),
    v6(0x5f00 << 112, 16, "segment routing SIDs (5f00::/16)", REFUSED),
    v6(0xfc00 << 112, 7, "unique local (fc00::/7)", REFUSED),
    v6(0xfe80 << 112, 10, "link-local (fe80::/10)", REFUSED),
    v6(0xfec0 << 112, 10, "site-local, deprecated (fec0::/10)", REFUSED),
    v6(0xff00 << 112, 8, "multicast (ff00::/8)", REFUSED),
];

impl SpecialPurpose {
    /// Whether `ip` is in this block.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let bits = |ip: IpAddr| match ip {
            IpAddr::V4(v4) => (u128::from(u32::from(v4)), 32u32),
            IpAddr::V6(v6) => (u128::from(v6), 128u32),
        };
        let ((net, width), (addr, other)) = (bits(self.network), bits(ip));
        let shift = width - u32::from(self.prefix);
        width == other && (shift == 128 || net >> shift == addr >> shift)
    }
}

/// The block of [`SPECIAL_PURPOSE`] `ip` is first found in, if any.
pub fn special_purpose(ip: IpAddr) -> Option<&'static SpecialPurpose> {
    SPECIAL_PURPOSE.iter().find(|row| row.contains(ip))
}

/// The refused range `ip` is in, by name, or `None` for an address a name
/// may lead to. No resolved name may connect to these ([`SPECIAL_PURPOSE`]:
/// private networks, this host, link-local, cloud metadata, carrier-grade
/// NAT, documentation, benchmarking, multicast, …); a grant reaches one only
/// by naming the literal address and port. IPv4-mapped, NAT64
/// (`64:ff9b::/96`) and 6to4 (`2002::/16`) IPv6 addresses are judged by the
/// IPv4 address inside them.
pub fn refused_range(ip: IpAddr) -> Option<&'static str> {
    let row = special_purpose(ip)?;
    match (row.judgement, ip) {
        (Judgement::Refused, _) => Some(row.name),
        (Judgement::ByIpv4At(at), IpAddr::V6(v6)) => {
            let o = v6.octets();
            refused_range(IpAddr::V4(Ipv4Addr::new(
                o[at],
                o[at + 1],
                o[at + 2],
                o[at + 3],
            )))
        }
        (Judgement::ByIpv4At(_), IpAddr::V4(_)) => None,
    }
}

/// The placeholder a program writes where a secret's value goes:
/// `{{secret:NAME}}`. The host substitutes it only on requests to the
/// secret's hosts.
pub const SECRET_OPEN: &str = "{{secret:";
/// The end of a secret placeholder.
pub const SECRET_CLOSE: &str = "}}";

/// Whether `name` is a valid secret name: 1 to 64 of `A-Za-z0-9_-`.
pub fn is_valid_secret_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The placeholder for secret `name`.
pub fn secret_placeholder(name: &str) -> String {
    format!("{SECRET_OPEN}{name}{SECRET_CLOSE}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> NetRule {
        text.parse().unwrap()
    }

    #[test]
    fn rules_round_trip_through_text() {
        for text in [
            "api.github.com",
            "api.github.com:8443",
            "*.example.com",
            "*.example.com:80",
            "127.0.0.1:8080",
            "93.184.215.14",
            "[::1]:8080",
            "[2606:4700::1111]",
        ] {
            assert_eq!(rule(text).to_string(), text);
        }
        assert_eq!(rule("API.GitHub.com").to_string(), "api.github.com");
    }

    #[test]
    fn bad_rules_say_what_is_wrong() {
        let problem = |text: &str| text.parse::<NetRule>().unwrap_err().problem;
        assert!(problem("").contains("empty"));
        assert!(problem("a..b").contains("1 to 63"));
        assert!(problem("a_b.com").contains("a-z"));
        assert!(problem("-a.com").contains("start or end"));
        assert!(problem("*.com").contains("top-level"));
        assert!(problem("a.com:0").contains("1 to 65535"));
        assert!(problem("a.com:99999").contains("1 to 65535"));
        assert!(problem("a.com:+80").contains("1 to 65535"));
        assert!(problem("::1").contains("brackets"));
        assert!(problem("[::1").contains("closing"));
        assert!(problem("[::1]x").contains(":PORT"));
        assert!(problem("1.2.3.999").contains("IPv4"));
        assert!(problem("127.0.0.1").contains("needs its port"));
        assert!(problem("[fe80::1]").contains("needs its port"));
        assert!(problem("10.1.2.3").contains("private"));
    }

    #[test]
    fn names_match_exactly_or_below_a_wildcard_on_the_right_port() {
        let exact = rule("api.example.com");
        assert!(exact.allows(&Target::Name("api.example.com"), 443, 443));
        assert!(exact.allows(&Target::Name("api.example.com"), 80, 80));
        assert!(!exact.allows(&Target::Name("api.example.com"), 8443, 443));
        assert!(!exact.allows(&Target::Name("x.api.example.com"), 443, 443));
        let wild = rule("*.example.com:8443");
        assert!(wild.allows(&Target::Name("a.example.com"), 8443, 443));
        assert!(wild.allows(&Target::Name("a.b.example.com"), 8443, 443));
        assert!(!wild.allows(&Target::Name("example.com"), 8443, 443));
        assert!(!wild.allows(&Target::Name("aexample.com"), 8443, 443));
        assert!(!wild.allows(&Target::Name("a.example.com"), 443, 443));
        assert!(!wild.allows(&Target::Ip([93, 184, 215, 14].into()), 8443, 443));
    }

    #[test]
    fn a_refused_address_needs_its_literal_address_and_port() {
        let loopback = rule("127.0.0.1:8080");
        let local = IpAddr::from([127, 0, 0, 1]);
        assert!(loopback.allows(&Target::Ip(local), 8080, 80));
        assert!(!loopback.allows(&Target::Ip(local), 8081, 80));
        assert!(!loopback.allows(&Target::Ip([127, 0, 0, 2].into()), 8080, 80));
        assert!(!loopback.allows(&Target::Name("localhost"), 8080, 80));
        let mapped = IpAddr::V6(Ipv4Addr::new(127, 0, 0, 1).to_ipv6_mapped());
        assert!(loopback.allows(&Target::Ip(mapped), 8080, 80));
        // A public address without a port allows the default one.
        let public = rule("93.184.215.14");
        assert!(public.allows(&Target::Ip([93, 184, 215, 14].into()), 443, 443));
        assert!(!public.allows(&Target::Ip([93, 184, 215, 14].into()), 22, 443));
    }

    #[test]
    fn every_listed_range_is_refused() {
        for refused in [
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "127.0.0.1",
            "127.255.0.9",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fc00::1",
            "fd00:ec2::254",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a9fe:a9fe",
        ] {
            let ip: IpAddr = refused.parse().unwrap();
            assert!(refused_range(ip).is_some(), "{refused}");
        }
        for allowed in [
            "93.184.215.14",
            "172.32.0.1",
            "100.128.0.1",
            "8.8.8.8",
            "192.0.1.255",
            "198.20.0.1",
            "2606:4700::1111",
            "2001:200::1",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ] {
            let ip: IpAddr = allowed.parse().unwrap();
            assert_eq!(refused_range(ip), None, "{allowed}");
        }
    }

    /// The blocks the issue found missing, each by name.
    #[test]
    fn the_special_purpose_blocks_once_missed_are_refused() {
        for (ip, name) in [
            ("::10.0.0.1", "IPv4-compatible, deprecated (::/96)"),
            ("::8.8.8.8", "IPv4-compatible, deprecated (::/96)"),
            ("64:ff9b:1::a00:1", "local-use NAT64 (64:ff9b:1::/48)"),
            ("2002:a00:1::1", "private (10.0.0.0/8)"),
            ("2002:7f00:1::", "loopback (127.0.0.0/8)"),
            (
                "2002:a9fe:a9fe::",
                "link-local and metadata (169.254.0.0/16)",
            ),
            ("fec0::1", "site-local, deprecated (fec0::/10)"),
            ("192.0.0.170", "IETF protocol assignments (192.0.0.0/24)"),
            ("198.18.0.1", "benchmarking (198.18.0.0/15)"),
            ("198.19.255.255", "benchmarking (198.18.0.0/15)"),
            ("2001:db8::1", "documentation (2001:db8::/32)"),
            ("2001::1", "IETF protocol assignments, Teredo (2001::/23)"),
            ("100::1", "discard-only (100::/64)"),
            ("3fff::1", "documentation (3fff::/20)"),
            ("5f00::1", "segment routing SIDs (5f00::/16)"),
            ("::ffff:192.0.2.1", "documentation (192.0.2.0/24)"),
        ] {
            assert_eq!(refused_range(ip.parse().unwrap()), Some(name), "{ip}");
        }
    }

    /// One check per row of the table: its first and last address are in it (or, for a
    /// row a more specific one comes before, refused all the same), the addresses just
    /// outside it are not in it, and a row judged by its IPv4 address refuses a private one
    /// inside it and allows a public one.
    #[test]
    fn every_row_of_the_special_purpose_table_holds() {
        let bits = |ip: IpAddr| match ip {
            IpAddr::V4(v4) => (u128::from(u32::from(v4)), 32u32),
            IpAddr::V6(v6) => (u128::from(v6), 128u32),
        };
        let at = |value: u128, width: u32| match width {
            32 => IpAddr::V4(Ipv4Addr::from(value as u32)),
            _ => IpAddr::V6(Ipv6Addr::from(value)),
        };
        for row in SPECIAL_PURPOSE {
            let (first, width) = bits(row.network);
            let size = 1u128 << (width - u32::from(row.prefix));
            assert_eq!(first % size, 0, "{}: not aligned to its prefix", row.name);
            let last = first + (size - 1);
            for inside in [first, last, first + size / 2] {
                let ip = at(inside, width);
                assert!(row.contains(ip), "{}: {ip}", row.name);
                let found = special_purpose(ip).unwrap();
                assert!(
                    found == row || found.prefix > row.prefix,
                    "{}: {ip} is found in {}",
                    row.name,
                    found.name
                );
                if row.judgement == Judgement::Refused {
                    assert!(refused_range(ip).is_some(), "{}: {ip}", row.name);
                }
            }
            if first > 0 {
                assert!(!row.contains(at(first - 1, width)), "{}", row.name);
            }
            if last < (u128::MAX >> (128 - width)) {
                assert!(!row.contains(at(last + 1, width)), "{}", row.name);
            }
            if let Judgement::ByIpv4At(offset) = row.judgement {
                let with = |v4: [u8; 4]| {
                    let mut octets = Ipv6Addr::from(first).octets();
                    octets[offset..offset + 4].copy_from_slice(&v4);
                    IpAddr::V6(Ipv6Addr::from(octets))
                };
                assert_eq!(
                    refused_range(with([10, 1, 2, 3])),
                    Some("private (10.0.0.0/8)"),
                    "{}",
                    row.name
                );
                assert_eq!(refused_range(with([8, 8, 4, 4])), None, "{}", row.name);
            }
        }
    }

    #[test]
    fn a_secret_without_a_scheme_goes_over_https_only() {
        let host = Target::Name("api.example.com");
        let bare: SecretRule = "api.example.com".parse().unwrap();
        assert!(!bare.cleartext);
        assert!(bare.allows(&host, 443, 443, true));
        assert!(!bare.allows(&host, 80, 80, false));
        let https: SecretRule = "https://api.example.com".parse().unwrap();
        assert_eq!(https, bare);
        let clear: SecretRule = "http://api.example.com:8080".parse().unwrap();
        assert!(clear.cleartext);
        assert!(clear.allows(&host, 8080, 80, false));
        assert!(!clear.allows(&host, 8080, 443, true));
        for text in ["api.example.com", "http://127.0.0.1:8080", "http://[::1]:9"] {
            assert_eq!(text.parse::<SecretRule>().unwrap().to_string(), text);
        }
        assert!("http://a.com/x".parse::<SecretRule>().is_err());
        assert!("ftp://a.com".parse::<SecretRule>().is_err());
    }

    #[test]
    fn secret_names_follow_their_rule() {
        assert!(is_valid_secret_name("GITHUB_TOKEN"));
        assert!(is_valid_secret_name("api-key-2"));
        for bad in ["", "a b", "a}}", "é", &"a".repeat(65)] {
            assert!(!is_valid_secret_name(bad), "{bad}");
        }
        assert_eq!(secret_placeholder("t"), "{{secret:t}}");
    }
}
