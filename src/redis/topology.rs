//! Which Redis the URL names: one node, a Redis Cluster, or the primary a set of Sentinels
//! watches. One string, so that a deployment switches by changing its configuration, not code.
//!
//! | URL | topology |
//! | --- | --- |
//! | `redis://[user:pass@]host:port[/db]` (also `rediss://`, `unix://`) | one node |
//! | `redis+cluster://[user:pass@]host:port[,host:port...][/]` | a Redis Cluster, from seed nodes |
//! | `redis+sentinel://[user:pass@]host:port[,host:port...]/master[/db]` | the primary the Sentinels name `master` |
//!
//! Credentials in a cluster or sentinel URL are those of the data nodes; the Sentinels themselves
//! are asked without credentials.

use ::redis::{ErrorKind, IntoConnectionInfo, RedisConnectionInfo, RedisError, RedisResult};

const CLUSTER: &str = "redis+cluster://";
const SENTINEL: &str = "redis+sentinel://";

/// Where decisions are stored, as the URL said.
pub(super) enum Topology {
    /// One node (a `redis://` URL, passed to the redis crate as it is).
    Single(String),
    /// A Redis Cluster: seed nodes as `redis://[user:pass@]host:port/` URLs.
    Cluster(Vec<String>),
    /// A primary found through Sentinels.
    Sentinel {
        /// `redis://host:port/` of each Sentinel.
        sentinels: Vec<String>,
        /// The name the Sentinels monitor the primary under.
        master: String,
        /// Database and credentials for the primary.
        node: RedisConnectionInfo,
    },
}

impl Topology {
    /// Where fleet watchers subscribe to announcements: the node itself on a one-node
    /// topology; none on a Cluster or with Sentinels (they poll; see `fleet.rs`).
    pub(super) fn subscribe_url(&self) -> Option<String> {
        match self {
            Topology::Single(url) => Some(url.clone()),
            Topology::Cluster(_) | Topology::Sentinel { .. } => None,
        }
    }

    /// Reads a URL; a cluster or sentinel URL with no host, an empty host, a port that is not
    /// a number or (sentinel) no master name is refused, saying which.
    pub(super) fn parse(url: &str) -> RedisResult<Topology> {
        if let Some(rest) = strip_scheme(url, CLUSTER) {
            let (auth, hosts, path) = split(url, rest)?;
            if !path.is_empty() {
                return Err(bad(
                    url,
                    "a cluster has no database: end the URL after the hosts",
                ));
            }
            let nodes = hosts
                .iter()
                .map(|h| format!("redis://{auth}{h}/"))
                .collect();
            return Ok(Topology::Cluster(nodes));
        }
        if let Some(rest) = strip_scheme(url, SENTINEL) {
            let (auth, hosts, path) = split(url, rest)?;
            let mut parts = path.splitn(2, '/');
            let master = parts.next().unwrap_or_default();
            if master.is_empty() {
                return Err(bad(
                    url,
                    "name the primary: redis+sentinel://host:port/<master>",
                ));
            }
            let db = parts.next().unwrap_or_default();
            // The redis crate parses credentials and database (with its percent-decoding).
            let node = format!("redis://{auth}sentinel-primary/{db}")
                .into_connection_info()
                .map_err(|e| bad(url, &format!("credentials or database: {e}")))?
                .redis_settings()
                .clone();
            let sentinels = hosts.iter().map(|h| format!("redis://{h}/")).collect();
            return Ok(Topology::Sentinel {
                sentinels,
                master: master.to_owned(),
                node,
            });
        }
        Ok(Topology::Single(url.to_owned()))
    }
}

fn strip_scheme<'a>(url: &'a str, scheme: &str) -> Option<&'a str> {
    let head = url.get(..scheme.len())?;
    head.eq_ignore_ascii_case(scheme)
        .then(|| &url[scheme.len()..])
}

/// `[auth@]h:p,h:p[/path]` into (`auth@` or "", the hosts, the path without its leading `/`).
fn split<'a>(url: &str, rest: &'a str) -> RedisResult<(&'a str, Vec<&'a str>, &'a str)> {
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (auth, hosts) = match authority.rsplit_once('@') {
        Some((a, h)) => (&authority[..a.len() + 1], h),
        None => ("", authority),
    };
    let hosts: Vec<&str> = hosts.split(',').collect();
    for h in &hosts {
        let port = h.rsplit_once(':');
        match port {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {}
            _ => return Err(bad(url, &format!("`{h}` is not host:port"))),
        }
    }
    Ok((auth, hosts, path.trim_end_matches('/')))
}

fn bad(url: &str, why: &str) -> RedisError {
    // Never echo credentials.
    let shown = match url.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((_, hosts)) => format!("{scheme}://***@{hosts}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    };
    RedisError::from((
        ErrorKind::InvalidClientConfig,
        "bad redis URL",
        format!("{shown}: {why}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_node_urls_pass_through() {
        match Topology::parse("redis://127.0.0.1:6379/2").unwrap() {
            Topology::Single(u) => assert_eq!(u, "redis://127.0.0.1:6379/2"),
            _ => panic!("single"),
        }
    }

    #[test]
    fn cluster_seeds_carry_the_credentials() {
        let Topology::Cluster(nodes) =
            Topology::parse("redis+cluster://u:p@10.0.0.1:7000,10.0.0.2:7001/").unwrap()
        else {
            panic!("cluster")
        };
        assert_eq!(
            nodes,
            ["redis://u:p@10.0.0.1:7000/", "redis://u:p@10.0.0.2:7001/"]
        );
    }

    #[test]
    fn sentinel_names_master_and_database() {
        let Topology::Sentinel {
            sentinels,
            master,
            node,
        } = Topology::parse("REDIS+SENTINEL://:pw@h1:26379,h2:26380/mymaster/3").unwrap()
        else {
            panic!("sentinel")
        };
        assert_eq!(sentinels, ["redis://h1:26379/", "redis://h2:26380/"]);
        assert_eq!(master, "mymaster");
        assert_eq!(node.db(), 3);
        assert_eq!(node.password(), Some("pw"));
    }

    #[test]
    fn bad_urls_say_why_and_hide_the_password() {
        for (url, why) in [
            ("redis+cluster://h1:7000,h2/", "`h2` is not host:port"),
            ("redis+cluster://h1:70000/", "`h1:70000` is not host:port"),
            ("redis+cluster://h1:7000/0", "a cluster has no database"),
            ("redis+sentinel://h1:26379", "name the primary"),
            ("redis+sentinel://:secret@h1:26379/", "name the primary"),
            ("redis+sentinel://h1:26379/m/x", "credentials or database"),
        ] {
            let e = Topology::parse(url).err().expect(url).to_string();
            assert!(e.contains(why), "{url}: {e}");
            assert!(!e.contains("secret"), "{e}");
        }
    }
}
