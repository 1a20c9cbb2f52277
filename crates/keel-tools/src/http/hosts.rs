//! The host allow-list: which URLs `http_get` may fetch, on the first request and on every
//! redirect.

use reqwest::Url;

/// Allowed host names, normalized (lower case, no trailing dot). Empty allows every host.
#[derive(Clone, Debug)]
pub(super) struct AllowedHosts {
    hosts: Vec<String>,
}

impl AllowedHosts {
    /// The allow-list from configuration; blank entries are ignored.
    pub(super) fn new(hosts: &[String]) -> Self {
        let hosts = hosts
            .iter()
            .map(|host| normalize(host))
            .filter(|host| !host.is_empty())
            .collect();
        AllowedHosts { hosts }
    }

    /// True when every host is allowed.
    pub(super) fn is_open(&self) -> bool {
        self.hosts.is_empty()
    }

    /// The allowed hosts, normalized.
    pub(super) fn names(&self) -> &[String] {
        &self.hosts
    }

    /// True when `url`'s host is allowed: equal to an entry, or (for a domain name) a
    /// subdomain of one. IP addresses must match exactly.
    pub(super) fn permits(&self, url: &Url) -> bool {
        if self.is_open() {
            return true;
        }
        let Some(host) = url.host_str() else {
            return false;
        };
        let is_domain = url.domain().is_some();
        let host = normalize(host);
        self.hosts.iter().any(|allowed| {
            host == *allowed
                || (is_domain
                    && host
                        .strip_suffix(allowed.as_str())
                        .is_some_and(|rest| rest.ends_with('.')))
        })
    }

    /// The refusal for `url`, naming the hosts that are allowed.
    pub(super) fn refusal(&self, url: &Url) -> String {
        format!(
            "cannot fetch {url}: the host {} is not allowed; allowed hosts (and their \
             subdomains): {}",
            url.host_str().unwrap_or("(none)"),
            self.names().join(", ")
        )
    }
}

/// A host name as compared: trimmed, lower case, without a trailing dot.
fn normalize(host: &str) -> String {
    host.trim().trim_end_matches('.').to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(list: &[&str], url: &str) -> bool {
        let list: Vec<String> = list.iter().map(|s| s.to_string()).collect();
        AllowedHosts::new(&list).permits(&Url::parse(url).unwrap())
    }

    #[test]
    fn an_empty_list_allows_everything() {
        assert!(allowed(&[], "https://anything.example/"));
        assert!(allowed(&["  "], "http://10.0.0.1/"));
    }

    #[test]
    fn hosts_match_exactly_or_as_subdomains() {
        let list = ["Example.com.", "api.github.com"];
        assert!(allowed(&list, "https://example.com/a"));
        assert!(allowed(&list, "https://EXAMPLE.com./a"));
        assert!(allowed(&list, "https://docs.example.com/"));
        assert!(allowed(&list, "https://a.b.example.com:8443/"));
        assert!(allowed(&list, "https://api.github.com/repos"));
        assert!(!allowed(&list, "https://github.com/"));
        assert!(!allowed(&list, "https://badexample.com/"));
        assert!(!allowed(&list, "https://example.com.evil.net/"));
    }

    #[test]
    fn ip_addresses_match_only_exactly() {
        assert!(allowed(&["127.0.0.1"], "http://127.0.0.1:8080/"));
        assert!(!allowed(&["0.0.1"], "http://127.0.0.1/"));
        assert!(allowed(&["[::1]"], "http://[::1]/"));
    }

    #[test]
    fn the_refusal_names_the_host_and_the_list() {
        let hosts = AllowedHosts::new(&["example.com".into(), "docs.rs".into()]);
        let message = hosts.refusal(&Url::parse("https://evil.net/x").unwrap());
        assert!(message.contains("evil.net is not allowed"), "{message}");
        assert!(message.contains("example.com, docs.rs"), "{message}");
    }
}
