//! The network allow-list: which `host:port` pairs the agent may reach through coder's
//! egress proxy ([`super::proxy`]).
//!
//! Pure data and parsing, no I/O: `--allow-host HOST[:PORT]` (and the config key
//! `allow_hosts`) become [`HostPort`]s, named presets (`@npm`, `@crates`, `@pypi`,
//! `@github`) expand to the hosts those registries serve from, and the backend's endpoint
//! comes from `ANTHROPIC_BASE_URL`. Matching is exact on the lower-cased name (or IP
//! literal) and the port: no wildcards, no suffix matches, so an entry never grants more
//! than it names. Names are resolved by the proxy, outside the sandbox, so the agent cannot
//! point an allowed name at another address.

use std::fmt;

use serde::{Deserialize, Serialize};

/// One allowed destination: a host name or IP literal (lower case, no brackets, no
/// trailing dot) and a TCP port.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct HostPort {
    pub host: String,
    pub port: u16,
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Why an `--allow-host` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid --allow-host {value:?}: {reason}")]
pub struct AllowHostError {
    pub value: String,
    pub reason: String,
}

/// The named presets and the hosts they stand for (all on port 443).
pub const PRESETS: [(&str, &[&str]); 4] = [
    ("npm", &["registry.npmjs.org", "registry.yarnpkg.com"]),
    (
        "crates",
        &["crates.io", "index.crates.io", "static.crates.io"],
    ),
    ("pypi", &["pypi.org", "files.pythonhosted.org"]),
    (
        "github",
        &[
            "github.com",
            "api.github.com",
            "codeload.github.com",
            "raw.githubusercontent.com",
            "objects.githubusercontent.com",
            "release-assets.githubusercontent.com",
        ],
    ),
];

impl HostPort {
    /// Parses `HOST`, `HOST:PORT`, `[V6]` or `[V6]:PORT`; the port defaults to 443.
    pub fn parse(text: &str) -> Result<HostPort, AllowHostError> {
        // A user info (`user:password@`) is never shown: the password would be printed.
        let shown = match text.rfind('@') {
            Some(at) => format!("[REDACTED]@{}", &text[at + 1..]),
            None => text.to_string(),
        };
        let refuse = |reason: &str| AllowHostError {
            value: shown.clone(),
            reason: reason.to_string(),
        };
        let text = text.trim();
        if text.contains('@') {
            return Err(refuse("give HOST[:PORT], without a user or password"));
        }
        if text.contains("://") || text.contains('/') {
            return Err(refuse("give HOST[:PORT], not a URL"));
        }
        let (host, port) = split_host_port(text).ok_or_else(|| refuse("malformed port"))?;
        let host = normalize_host(host).ok_or_else(|| refuse("not a host name or IP address"))?;
        let port = port.unwrap_or(443);
        if port == 0 {
            return Err(refuse("port 0"));
        }
        Ok(HostPort { host, port })
    }
}

/// Expands one `--allow-host` value: `@NAME` to its preset's hosts, anything else to one
/// [`HostPort`].
pub fn expand(value: &str) -> Result<Vec<HostPort>, AllowHostError> {
    let Some(name) = value.trim().strip_prefix('@') else {
        return HostPort::parse(value).map(|hp| vec![hp]);
    };
    let hosts = PRESETS
        .iter()
        .find(|(preset, _)| *preset == name)
        .map(|(_, hosts)| *hosts)
        .ok_or_else(|| AllowHostError {
            value: value.to_string(),
            reason: format!(
                "unknown preset (known: {})",
                PRESETS
                    .iter()
                    .map(|(p, _)| format!("@{p}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })?;
    Ok(hosts
        .iter()
        .map(|h| HostPort {
            host: (*h).to_string(),
            port: 443,
        })
        .collect())
}

/// Expands every value, sorted and without duplicates.
pub fn expand_all<S: AsRef<str>>(values: &[S]) -> Result<Vec<HostPort>, AllowHostError> {
    let mut all = Vec::new();
    for value in values {
        all.extend(expand(value.as_ref())?);
    }
    all.sort();
    all.dedup();
    Ok(all)
}

/// The backend's endpoint from a child environment: the host and port of
/// `ANTHROPIC_BASE_URL`, or `api.anthropic.com:443` without it.
pub fn backend_endpoint(env: &[(std::ffi::OsString, std::ffi::OsString)]) -> Option<HostPort> {
    let url = env
        .iter()
        .find(|(k, _)| k == "ANTHROPIC_BASE_URL")
        .and_then(|(_, v)| v.to_str())
        .filter(|v| !v.is_empty());
    match url {
        None => Some(HostPort {
            host: "api.anthropic.com".to_string(),
            port: 443,
        }),
        Some(url) => url_endpoint(url),
    }
}

/// The `host:port` of an `http://` or `https://` URL (the scheme's port by default).
pub fn url_endpoint(url: &str) -> Option<HostPort> {
    let (scheme, rest) = url.split_once("://")?;
    let default = match scheme.to_ascii_lowercase().as_str() {
        "https" => 443,
        "http" => 80,
        _ => return None,
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let (host, port) = split_host_port(authority)?;
    Some(HostPort {
        host: normalize_host(host)?,
        port: port.unwrap_or(default),
    })
}

/// A request's authority (`host:port` of CONNECT, or the host of an absolute URI with the
/// scheme's default port), parsed like an allow-list entry.
pub fn authority(text: &str, default_port: u16) -> Option<HostPort> {
    let (host, port) = split_host_port(text)?;
    Some(HostPort {
        host: normalize_host(host)?,
        port: port.unwrap_or(default_port),
    })
}

/// Splits `host`, `host:port`, `[v6]`, `[v6]:port`; `None` for a malformed port.
fn split_host_port(text: &str) -> Option<(&str, Option<u16>)> {
    if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after {
            "" => Some((host, None)),
            _ => Some((host, Some(after.strip_prefix(':')?.parse().ok()?))),
        };
    }
    match text.rsplit_once(':') {
        // A bare IPv6 literal has several colons and no port.
        Some((host, _)) if host.contains(':') => Some((text, None)),
        Some((host, port)) => Some((host, Some(port.parse().ok()?))),
        None => Some((text, None)),
    }
}

/// Lower case, no trailing dot; only letters, digits, `-`, `.`, `_` (names) or a valid IP
/// literal.
fn normalize_host(host: &str) -> Option<String> {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if host.is_empty() {
        return None;
    }
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Some(ip.to_string());
    }
    let valid = host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
        && !host.starts_with('.')
        && !host.contains("..");
    valid.then_some(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hp(host: &str, port: u16) -> HostPort {
        HostPort {
            host: host.to_string(),
            port,
        }
    }

    #[test]
    fn parses_hosts_ports_and_ipv6() {
        assert_eq!(
            HostPort::parse("Example.COM.").unwrap(),
            hp("example.com", 443)
        );
        assert_eq!(
            HostPort::parse("example.com:8080").unwrap(),
            hp("example.com", 8080)
        );
        assert_eq!(HostPort::parse("127.0.0.1:9").unwrap(), hp("127.0.0.1", 9));
        assert_eq!(HostPort::parse("[::1]:9").unwrap(), hp("::1", 9));
        assert_eq!(HostPort::parse("::1").unwrap(), hp("::1", 443));
        assert_eq!(hp("::1", 9).to_string(), "[::1]:9");
        for bad in [
            "",
            "https://example.com",
            "example.com/x",
            "example.com:x",
            "example.com:0",
            "a b",
            "*.example.com",
            "ex..ample",
        ] {
            assert!(HostPort::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn presets_expand_and_unknown_ones_are_refused() {
        let npm = expand("@npm").unwrap();
        assert!(npm.contains(&hp("registry.npmjs.org", 443)));
        assert!(
            expand("@crates")
                .unwrap()
                .contains(&hp("index.crates.io", 443))
        );
        assert!(
            expand("@pypi")
                .unwrap()
                .contains(&hp("files.pythonhosted.org", 443))
        );
        assert!(expand("@github").unwrap().contains(&hp("github.com", 443)));
        let err = expand("@nope").unwrap_err();
        assert!(err.reason.contains("@npm"), "{err}");
        let all = expand_all(&["@pypi", "pypi.org", "x.org:1"]).unwrap();
        assert_eq!(all.iter().filter(|h| h.host == "pypi.org").count(), 1);
    }

    #[test]
    fn backend_endpoint_comes_from_the_base_url() {
        let env = |v: &str| vec![("ANTHROPIC_BASE_URL".into(), v.into())];
        assert_eq!(backend_endpoint(&[]), Some(hp("api.anthropic.com", 443)));
        assert_eq!(
            backend_endpoint(&env("http://127.0.0.1:4567")),
            Some(hp("127.0.0.1", 4567))
        );
        assert_eq!(
            backend_endpoint(&env("https://user:pw@API.z.ai/api/anthropic")),
            Some(hp("api.z.ai", 443))
        );
        assert_eq!(
            backend_endpoint(&env("http://[::1]/x")),
            Some(hp("::1", 80))
        );
        assert_eq!(backend_endpoint(&env("ftp://x")), None);
    }

    #[test]
    fn authorities_of_requests() {
        assert_eq!(
            authority("Example.com:443", 443),
            Some(hp("example.com", 443))
        );
        assert_eq!(authority("example.com", 80), Some(hp("example.com", 80)));
        assert_eq!(authority("[::1]:8080", 80), Some(hp("::1", 8080)));
        assert_eq!(authority("example.com:99999", 80), None);
        assert_eq!(authority("", 80), None);
    }
}
