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

/// The refused range `ip` is in, by name, or `None` for an address a name
/// may lead to. No resolved name may connect to these (private networks,
/// this host, link-local, cloud metadata, carrier-grade NAT, multicast);
/// a grant reaches one only by naming the literal address and port.
/// IPv4-mapped and NAT64 (`64:ff9b::/96`) IPv6 addresses are judged by the
/// IPv4 address inside them.
pub fn refused_range(ip: IpAddr) -> Option<&'static str> {
    match canonical(ip) {
        IpAddr::V4(v4) => refused_v4(v4),
        IpAddr::V6(v6) => {
            let s = v6.segments();
            if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
                let [a, b] = s[6].to_be_bytes();
                let [c, d] = s[7].to_be_bytes();
                return refused_v4(Ipv4Addr::new(a, b, c, d));
            }
            if v6.is_loopback() {
                Some("loopback (::1)")
            } else if v6.is_unspecified() {
                Some("unspecified (::)")
            } else if s[0] & 0xfe00 == 0xfc00 {
                Some("unique local (fc00::/7)")
            } else if s[0] & 0xffc0 == 0xfe80 {
                Some("link-local (fe80::/10)")
            } else if s[0] & 0xff00 == 0xff00 {
                Some("multicast (ff00::/8)")
            } else {
                None
            }
        }
    }
}

fn refused_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, _, _] = ip.octets();
    match (a, b) {
        (0, _) => Some("this-network (0.0.0.0/8)"),
        (10, _) => Some("private (10.0.0.0/8)"),
        (100, 64..=127) => Some("carrier-grade NAT (100.64.0.0/10)"),
        (127, _) => Some("loopback (127.0.0.0/8)"),
        (169, 254) => Some("link-local and metadata (169.254.0.0/16)"),
        (172, 16..=31) => Some("private (172.16.0.0/12)"),
        (192, 168) => Some("private (192.168.0.0/16)"),
        (224..=239, _) => Some("multicast (224.0.0.0/4)"),
        (240..=255, _) => Some("reserved and broadcast (240.0.0.0/4)"),
        _ => None,
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
            "[2001:db8::1]",
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
            "2001:db8::1",
            "64:ff9b::808:808",
        ] {
            let ip: IpAddr = allowed.parse().unwrap();
            assert_eq!(refused_range(ip), None, "{allowed}");
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
