//! Just enough URL parsing for a backend's base URL: scheme, host and port.
//!
//! coder needs the host and port for three things (the sandbox's TCP connect rule, the
//! doctor's reachability probe, and the proxy bypass for loopback backends) and must reject
//! anything that is not http(s). The URL itself is passed to the CLI unchanged, so this
//! parser never normalises or re-serialises it.

use std::fmt;

/// `http` or `https`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    /// The port used when the URL names none.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

/// The parts of an http(s) URL coder cares about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub scheme: Scheme,
    /// Host name or IP literal, without brackets, lower-cased.
    pub host: String,
    /// The explicit port, or the scheme's default.
    pub port: u16,
}

impl Endpoint {
    /// Parses `scheme://[userinfo@]host[:port][/path][?query][#fragment]`; `None` when the
    /// scheme is not http(s), the host is empty, or the port is not a number.
    pub fn parse(url: &str) -> Option<Endpoint> {
        let url = url.trim();
        let (scheme, rest) = url.split_once("://")?;
        let scheme = if scheme.eq_ignore_ascii_case("http") {
            Scheme::Http
        } else if scheme.eq_ignore_ascii_case("https") {
            Scheme::Https
        } else {
            return None;
        };
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let authority = &rest[..authority_end];
        let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
        let (host, port) = if let Some(bracketed) = host_port.strip_prefix('[') {
            let (host, after) = bracketed.split_once(']')?;
            let port = match after {
                "" => None,
                p => Some(p.strip_prefix(':')?),
            };
            (host, port)
        } else {
            match host_port.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (host_port, None),
            }
        };
        if host.is_empty() || host.chars().any(|c| c.is_whitespace()) {
            return None;
        }
        let port = match port {
            None | Some("") => scheme.default_port(),
            Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0)?,
        };
        Some(Endpoint {
            scheme,
            host: host.to_ascii_lowercase(),
            port,
        })
    }

    /// Whether the host is this machine (`localhost`, 127.0.0.0/8, `::1`).
    pub fn is_loopback(&self) -> bool {
        if self.host == "localhost" || self.host.ends_with(".localhost") {
            return true;
        }
        self.host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_vendor_urls_with_default_ports() {
        let e = Endpoint::parse("https://api.z.ai/api/anthropic").unwrap();
        assert_eq!(
            (e.scheme, e.host.as_str(), e.port),
            (Scheme::Https, "api.z.ai", 443)
        );
        let e = Endpoint::parse("http://127.0.0.1:8765").unwrap();
        assert_eq!(
            (e.scheme, e.host.as_str(), e.port),
            (Scheme::Http, "127.0.0.1", 8765)
        );
        assert!(e.is_loopback());
    }

    #[test]
    fn handles_userinfo_ipv6_and_case() {
        let e = Endpoint::parse("HTTPS://user:pw@[::1]:9000/x?y#z").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("::1", 9000));
        assert!(e.is_loopback());
        assert_eq!(e.to_string(), "[::1]:9000");
        assert_eq!(
            Endpoint::parse("http://Example.COM/").unwrap().host,
            "example.com"
        );
    }

    #[test]
    fn rejects_non_http_and_broken_urls() {
        for bad in [
            "ftp://host/",
            "api.z.ai/api/anthropic",
            "https://",
            "https://:443/",
            "https://host:notaport/",
            "https://host:0/",
            "https://host:70000/",
            "file:///etc/passwd",
            "https://[::1/",
        ] {
            assert_eq!(Endpoint::parse(bad), None, "{bad}");
        }
    }
}
