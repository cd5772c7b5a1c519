//! The checks that span fields, or that a field's type cannot make on its own: what
//! [`Profile::validate`] refuses. The scalars are valid by construction and need no check.

use core::time::Duration;
use std::collections::HashSet;

use super::error::ProfileError;
use super::schema::Profile;

/// A failed check, with what `from_yaml` searches the source for to give a position: the
/// `key` and the start of its `value` (empty: the key alone).
pub(super) struct Refusal {
    pub(super) message: String,
    pub(super) key: &'static str,
    pub(super) value: String,
}

fn refuse(message: String, key: &'static str, value: &str) -> Result<(), Refusal> {
    Err(Refusal {
        message,
        key,
        value: value.to_owned(),
    })
}

impl Profile {
    /// Checks what no single field can: a name and at least one route class, routes naming
    /// existing classes with a valid method and path, pinned tenants on existing shards, a
    /// `Retry-After` cap of at least 1s. Deserializing a profile runs it, and so do
    /// `Builder::build` and `Limiter::reload`; call it after changing a profile in Rust to
    /// learn early. Refusals have kind [`Invalid`](super::ProfileErrorKind::Invalid) and no
    /// position.
    pub fn validate(&self) -> Result<(), ProfileError> {
        self.check().map_err(|r| ProfileError::invalid(r.message))
    }

    pub(super) fn check(&self) -> Result<(), Refusal> {
        if self.name.trim().is_empty() {
            return refuse("name: must not be empty".into(), "name", "");
        }
        if self.route_classes.is_empty() {
            return refuse(
                "route_classes: at least one route class is needed".into(),
                "route_classes",
                "",
            );
        }
        self.check_routes()?;
        self.check_shares()?;
        self.check_leases()?;
        if let Some(d) = &self.descriptors {
            d.check(
                |c| self.route_classes.get(c).is_some(),
                || self.route_classes.iter().map(|(k, _)| k).collect(),
            )
            .map_err(|r| Refusal {
                message: r.message,
                key: r.key,
                value: r.value,
            })?;
        }
        if let Some(sc) = &self.shared_capacity {
            let shards = sc.shards.get();
            for (name, t) in sc.tenants.iter() {
                if let Some(s) = t.shard.filter(|&s| s >= shards) {
                    return refuse(
                        format!(
                            "shared_capacity.tenants.{name}.shard: invalid value {s}, expected a \
                             shard below shards ({shards})"
                        ),
                        "shard",
                        &s.to_string(),
                    );
                }
            }
        }
        let max = self.retry_after.max;
        if max.get() < Duration::from_secs(1) {
            return refuse(
                format!("retry_after.max: invalid value {max}, expected at least 1s"),
                "max",
                &max.to_string(),
            );
        }
        Ok(())
    }

    /// A lease larger than a bucket (or than a shard's slots) could never be taken whole, and
    /// one spent longer than the burst's period would stretch the burst: both refused.
    fn check_leases(&self) -> Result<(), Refusal> {
        for (name, class) in self.route_classes.iter() {
            let Some(lease) = class.lease else { continue };
            let tokens = lease.max_tokens.get();
            let mut most = class.burst.tokens.get().min(class.sustained.tokens.get());
            let mut what = "the class's smaller bucket";
            if let Some(sc) = &self.shared_capacity {
                if sc.slots_per_window.get() < most {
                    most = sc.slots_per_window.get();
                    what = "shared_capacity.slots_per_window";
                }
            }
            if tokens > most {
                return refuse(
                    format!(
                        "route_classes.{name}.lease.max_tokens: invalid value {tokens}, expected \
                         at most {most} ({what})"
                    ),
                    "max_tokens",
                    &tokens.to_string(),
                );
            }
            let (ttl, per) = (lease.ttl, class.burst.per);
            if ttl.get() > per.get() {
                return refuse(
                    format!(
                        "route_classes.{name}.lease.ttl: invalid value {ttl}, expected at most \
                         the burst's per ({per})"
                    ),
                    "ttl",
                    &ttl.to_string(),
                );
            }
        }
        Ok(())
    }

    /// A share of slots that gives a tenant less than one slot (`tenant_share: 5e-324`, or a
    /// small weight) would be rounded up to one without a word: refused, with the smallest
    /// share that means a slot. The identity table's default share is let be on a table too
    /// small for it (one slot each, as ever): only a share someone chose is refused.
    fn check_shares(&self) -> Result<(), Refusal> {
        let identities = (
            self.identities.capacity.get(),
            self.identities.tenant_share.get(),
        );
        let mut shares = Vec::new();
        if identities.1 < super::schema::DEFAULT_IDENTITY_SHARE {
            shares.push(("identities.tenant_share", identities, 1.0, None));
        }
        if let Some(sc) = &self.shared_capacity {
            let slots = (sc.slots_per_window.get(), sc.tenant_share.get());
            shares.push(("shared_capacity.tenant_share", slots, 1.0, None));
            for (name, t) in sc.tenants.iter() {
                let w = t.weight.get();
                shares.push(("shared_capacity.tenant_share", slots, w, Some(name)));
            }
        }
        for (field, (slots, share), weight, tenant) in shares {
            if slots as f64 * share * weight >= 1.0 {
                continue;
            }
            let least = 1.0 / (slots as f64 * weight);
            return match tenant {
                None => refuse(
                    format!(
                        "{field}: invalid value {share:?}: {slots} slots x {share:?} is less than \
                         one slot; expected at least {least:?}"
                    ),
                    "tenant_share",
                    &format!("{share:?}"),
                ),
                Some(name) => refuse(
                    format!(
                        "shared_capacity.tenants.{name}.weight: invalid value {weight:?}: with \
                         {field} {share:?} of {slots} slots it gives less than one slot; \
                         expected a weight of at least {:?}",
                        1.0 / (slots as f64 * share)
                    ),
                    "weight",
                    &format!("{weight:?}"),
                ),
            };
        }
        Ok(())
    }

    /// A route naming an unknown class would leave its requests unlimited.
    fn check_routes(&self) -> Result<(), Refusal> {
        // Hashed once: looking each route's class up in the list was quadratic in the number of routes.
        let classes: HashSet<&str> = self.route_classes.iter().map(|(k, _)| k).collect();
        for (i, r) in self.routes.iter().enumerate() {
            if !classes.contains(r.class.as_str()) {
                let known: Vec<&str> = self.route_classes.iter().map(|(k, _)| k).collect();
                return refuse(
                    format!(
                        "routes[{i}].class: unknown route class {:?}, expected one of {known:?}",
                        r.class
                    ),
                    "class",
                    &r.class,
                );
            }
            let method_ok = r.method == "*"
                || (!r.method.is_empty() && r.method.bytes().all(|b| b.is_ascii_uppercase()));
            if !method_ok {
                return refuse(
                    format!(
                        "routes[{i}].method: invalid method {:?}, expected `*` or an upper-case \
                         HTTP method",
                        r.method
                    ),
                    "method",
                    &r.method,
                );
            }
            if !r.path.starts_with('/') {
                return refuse(
                    format!(
                        "routes[{i}].path: invalid path {:?}, expected a path starting with `/`",
                        r.path
                    ),
                    "path",
                    &r.path,
                );
            }
        }
        Ok(())
    }
}
