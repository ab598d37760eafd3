//! The network rules every part of the host shares: which URLs it will talk to, what counts as loopback,
//! the one HTTP client builder (rustls on ring, the system's roots plus a CA the user names), and the
//! limits on every listener ([`listen`]).

pub mod listen;

use std::time::Duration;

/// Whether `host`, as a URL or a `host:port` gives it (`localhost`, `127.0.0.1`, `::1` or `[::1]`), is a
/// loopback address. The one such check: a registry, an OCI reference and an MCP server by URL agree.
pub fn is_loopback_host(host: &str) -> bool {
    let h = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    h.eq_ignore_ascii_case("localhost") || h.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Why a URL is refused: the message names the URL and the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlRefused(pub String);

impl std::fmt::Display for UrlRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UrlRefused {}

/// Checks a URL against the transport rules of every outgoing request (a registry, an MCP server by
/// URL, a redirect of either): `https`, or `http` to a loopback address only (nothing an agent can read on
/// the wire), a host, and no credentials in the URL (they would be written into evidence and logs).
pub fn check_url(url: &str) -> Result<reqwest::Url, UrlRefused> {
    let refuse = |why: String| Err(UrlRefused(why));
    let u = match reqwest::Url::parse(url) {
        Ok(u) => u,
        Err(e) => return refuse(format!("`{url}` is not a URL: {e}")),
    };
    if !u.username().is_empty() || u.password().is_some() {
        return refuse(format!("`{url}`: credentials in a URL are refused (they would be written into evidence); give a token in a header"));
    }
    match (u.scheme(), u.host_str()) {
        (_, None) | (_, Some("")) => refuse(format!("`{url}` names no host")),
        ("https", _) => Ok(u),
        ("http", Some(h)) if is_loopback_host(h) => Ok(u),
        ("http", _) => refuse(format!("`{url}`: plain http:// is only allowed to a loopback address; use https://")),
        (s, _) => refuse(format!("`{url}`: the scheme `{s}` is not supported (https://, or http:// on loopback)")),
    }
}

/// What the client does with a redirect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redirects {
    /// None followed: an MCP server's URL is where it is, and a redirect would carry the configured
    /// headers to another origin.
    Refuse,
    /// At most this many, each one checked by [`check_url`] and never from `https` down to `http`.
    Checked(usize),
}

/// The one HTTP client builder: rustls with the ring provider, the system's roots plus `extra_ca_pem`
/// (PEM bundles), the redirect rule given, a connect timeout and, when given, a whole-request timeout.
pub fn http_client(extra_ca_pem: &[Vec<u8>], redirects: Redirects, connect: Duration, request: Option<Duration>) -> Result<reqwest::Client, String> {
    // One process-wide provider: rustls is built without a default one (no aws-lc, no cmake).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut certs = Vec::new();
    for pem in extra_ca_pem {
        certs.extend(reqwest::Certificate::from_pem_bundle(pem).map_err(|e| format!("the CA file is not PEM certificates: {e}"))?);
    }
    let policy = match redirects {
        Redirects::Refuse => reqwest::redirect::Policy::none(),
        Redirects::Checked(max) => reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() > max {
                return attempt.error(format!("more than {max} redirects"));
            }
            let downgrade = attempt.previous().last().is_some_and(|p| p.scheme() == "https") && attempt.url().scheme() != "https";
            let to = attempt.url().to_string();
            if downgrade {
                return attempt.error(format!("a redirect from https down to `{to}`"));
            }
            match check_url(&to) {
                Ok(_) => attempt.follow(),
                Err(e) => attempt.error(e.0),
            }
        }),
    };
    let mut b = reqwest::Client::builder()
        .tls_certs_merge(certs)
        .redirect(policy)
        .connect_timeout(connect)
        .user_agent(concat!("runbook-host/", env!("CARGO_PKG_VERSION")));
    if let Some(t) = request {
        b = b.timeout(t);
    }
    b.build().map_err(|e| format!("cannot set up the HTTP client: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_in_every_spelling() {
        for h in ["localhost", "LOCALHOST", "127.0.0.1", "127.9.9.9", "::1", "[::1]"] {
            assert!(is_loopback_host(h), "{h}");
        }
        for h in ["10.0.0.1", "[::2]", "localhost.example", "", "[]", "::ffff:10.0.0.1"] {
            assert!(!is_loopback_host(h), "{h}");
        }
    }

    #[test]
    fn urls_by_the_transport_rules() {
        for ok in ["https://registry.example/x/", "http://127.0.0.1:8080/x", "http://[::1]:8080/x", "http://localhost/x"] {
            assert!(check_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://registry.example/x",
            "http://10.0.0.1/x",
            "ftp://127.0.0.1/x",
            "https://user:pw@registry.example/",
            "https://tok@registry.example/",
            "not a url",
            "file:///etc/passwd",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
    }
}
