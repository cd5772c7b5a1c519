//! `descriptors:` the optional section that tells `tollgate-server` (the Envoy rate limit
//! service) how a request's descriptors become keys: the domain it serves and, per rule, which
//! descriptor entries give the tenant, the principal, the route class, or the anonymous
//! network address. The engine never reads it; the server does the matching.
//!
//! ```yaml
//! descriptors:
//!   domain: partner-apis
//!   unknown_domain: allow          # allow (answer OK, counted) or refuse
//!   unmatched: allow               # a descriptor no rule matches: allow (OK) or refuse
//!   rules:                         # first match wins
//!     - { when: { generic_key: reports }, tenant: tenant, principal: user, class: expensive }
//!     - { tenant: tenant, principal: user, class_from: route_class }
//!     - { anonymous: remote_address, class: read }
//! ```

use core::fmt;

use serde::{Deserialize, Deserializer, Serialize};

use super::error::{value_error, ProfileError};
use super::ordered_map::OrderedMap;

/// The longest descriptor entry key a rule may name, and the longest domain, in bytes.
pub const MAX_ENTRY_KEY_LEN: usize = 128;
/// The most rules `descriptors.rules` may hold.
pub const MAX_DESCRIPTOR_RULES: usize = 1024;

/// `descriptors:` the Envoy domain served and the rules mapping descriptors to keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Descriptors {
    /// The `domain` of the rate limit requests served (Envoy's `domain` in the filter config).
    pub domain: EntryKey,
    /// What a request for another domain gets: `allow` (OK, counted in
    /// `tollgate_server_unknown_domain_total`; the default) or `refuse` (a gRPC error).
    #[serde(default)]
    pub unknown_domain: Unmatched,
    /// What a descriptor that matches no rule gets: `allow` (not limited; the default) or
    /// `refuse` (the whole request is refused with a gRPC error, nothing charged).
    #[serde(default)]
    pub unmatched: Unmatched,
    /// The rules, first match wins; at least one, at most [`MAX_DESCRIPTOR_RULES`].
    pub rules: Vec<DescriptorRule>,
}

impl Descriptors {
    /// What these rules let through unlimited, as sentences for a start-up warning (empty when
    /// nothing is): `unknown_domain: allow` (a request for another domain is answered OK), and
    /// `unmatched: allow` where a rule takes its route class from an entry (a value naming no
    /// class leaves the descriptor unmatched, so not limited at all). Either is a hole when the
    /// caller can choose the value, as when Envoy fills the entry from a request header;
    /// `refuse` closes it.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.unknown_domain == Unmatched::Allow {
            out.push(format!(
                "descriptors.unknown_domain is allow: a request for a domain other than {:?} \
                 is answered OK and limited by nothing; set `unknown_domain: refuse` unless \
                 other domains are meant to pass",
                self.domain.as_str()
            ));
        }
        if self.unmatched == Unmatched::Allow {
            for (i, r) in self.rules.iter().enumerate() {
                if let Some(from) = &r.class_from {
                    out.push(format!(
                        "descriptors.rules[{i}] takes its route class from the entry {:?} and \
                         descriptors.unmatched is allow: a value naming no route class is \
                         limited by nothing. If Envoy fills {:?} from a request header, the \
                         caller chooses it: set `unmatched: refuse`",
                        from.as_str(),
                        from.as_str()
                    ));
                }
            }
        }
        out
    }
}

/// `allow` or `refuse`: what a request that the rules do not cover gets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unmatched {
    /// Not limited: the descriptor (or the request, for a domain) is answered OK.
    #[default]
    Allow,
    /// Refused with a gRPC error, which Envoy's `failure_mode_deny` turns into its
    /// `status_on_error`.
    Refuse,
}

/// One rule: which descriptors it matches and how they become a key.
///
/// A rule matches a descriptor that has every entry it names (`when`'s with exactly those
/// values, and the `tenant`, `principal`, `anonymous` and `class_from` entries with any value);
/// other entries of the descriptor are ignored. A rule names either `tenant` and `principal`
/// (an authenticated key) or `anonymous` (an address, grouped by the profile's `anonymous`
/// prefixes), and either `class` or `class_from`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DescriptorRule {
    /// Entries the descriptor must carry with exactly these values (e.g. Envoy's
    /// `generic_key` action), or none.
    #[serde(default, skip_serializing_if = "OrderedMap::is_empty")]
    pub when: OrderedMap<String>,
    /// The entry whose value is the tenant id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<EntryKey>,
    /// The entry whose value is the principal id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<EntryKey>,
    /// The entry whose value is the caller's IP address (Envoy's `remote_address` action
    /// sends the key `remote_address`): the anonymous class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anonymous: Option<EntryKey>,
    /// The route class, fixed for the rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// The entry whose value names the route class; a value naming no class of the profile
    /// makes the descriptor unmatched by this rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_from: Option<EntryKey>,
}

/// A descriptor entry key or a domain: 1 to [`MAX_ENTRY_KEY_LEN`] bytes of visible ASCII
/// (no space, no control character), as Envoy's actions and filter configs write them.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct EntryKey(String);

impl EntryKey {
    /// The key if it is 1 to 128 bytes of visible ASCII, else an `Invalid` error.
    pub fn new(key: impl Into<String>) -> Result<EntryKey, ProfileError> {
        let key = key.into();
        let ok = !key.is_empty()
            && key.len() <= MAX_ENTRY_KEY_LEN
            && key.bytes().all(|b| b.is_ascii_graphic());
        if ok {
            Ok(EntryKey(key))
        } else {
            Err(ProfileError::invalid(format!(
                "invalid key {key:?}, expected 1 to {MAX_ENTRY_KEY_LEN} bytes of visible ASCII"
            )))
        }
    }

    /// The key.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for EntryKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        EntryKey::new(String::deserialize(d)?).map_err(value_error)
    }
}

impl fmt::Display for EntryKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A failed check of the section: the message, and the key and value `from_yaml` looks for
/// in the source to give a position.
pub(super) struct DescriptorRefusal {
    pub(super) message: String,
    pub(super) key: &'static str,
    pub(super) value: String,
}

impl Descriptors {
    /// What no field can check alone: at least one rule and not too many, each naming one kind
    /// of identity and one way to the class, classes that exist, keys named once per rule.
    /// `classes` tells whether the profile has a class; `known` lists them for the message.
    pub(super) fn check<'c>(
        &self,
        classes: impl Fn(&str) -> bool,
        known: impl Fn() -> Vec<&'c str>,
    ) -> Result<(), DescriptorRefusal> {
        let refuse = |message: String, key: &'static str, value: &str| {
            Err(DescriptorRefusal {
                message,
                key,
                value: value.to_owned(),
            })
        };
        if self.rules.is_empty() {
            return refuse(
                "descriptors.rules: at least one rule is needed".into(),
                "rules",
                "",
            );
        }
        if self.rules.len() > MAX_DESCRIPTOR_RULES {
            return refuse(
                format!(
                    "descriptors.rules: {} rules, more than the {MAX_DESCRIPTOR_RULES} allowed",
                    self.rules.len()
                ),
                "rules",
                "",
            );
        }
        for (i, r) in self.rules.iter().enumerate() {
            let at = format!("descriptors.rules[{i}]");
            match (&r.tenant, &r.principal, &r.anonymous) {
                (Some(_), Some(_), None) | (None, None, Some(_)) => {}
                (_, _, Some(a)) => {
                    return refuse(
                        format!(
                            "{at}.anonymous: a rule names either `anonymous` or `tenant` and \
                             `principal`, not both"
                        ),
                        "anonymous",
                        a.as_str(),
                    )
                }
                (Some(t), None, None) => {
                    return refuse(
                        format!("{at}.principal: `tenant` needs `principal` too"),
                        "tenant",
                        t.as_str(),
                    )
                }
                (None, Some(p), None) => {
                    return refuse(
                        format!("{at}.tenant: `principal` needs `tenant` too"),
                        "principal",
                        p.as_str(),
                    )
                }
                (None, None, None) => {
                    return refuse(
                        format!(
                            "{at}: a rule names `tenant` and `principal`, or `anonymous`: whose \
                             bucket a descriptor is"
                        ),
                        "rules",
                        "",
                    )
                }
            }
            match (&r.class, &r.class_from) {
                (Some(c), None) if !classes(c) => {
                    return refuse(
                        format!(
                            "{at}.class: unknown route class {c:?}, expected one of {:?}",
                            known()
                        ),
                        "class",
                        c,
                    )
                }
                (Some(_), None) | (None, Some(_)) => {}
                (Some(c), Some(_)) => {
                    return refuse(
                        format!(
                            "{at}.class: a rule names either `class` or `class_from`, not both"
                        ),
                        "class",
                        c,
                    )
                }
                (None, None) => {
                    return refuse(
                        format!("{at}: a rule names its route class: `class` or `class_from`"),
                        "rules",
                        "",
                    )
                }
            }
            let named = [&r.tenant, &r.principal, &r.anonymous, &r.class_from];
            let mut keys: Vec<&str> = named
                .iter()
                .filter_map(|k| k.as_ref())
                .map(|k| k.as_str())
                .collect();
            keys.extend(r.when.iter().map(|(k, _)| k));
            keys.sort_unstable();
            if let Some(w) = keys.windows(2).find(|w| w[0] == w[1]) {
                return refuse(
                    format!(
                        "{at}: the entry {:?} is named twice; each entry gives one thing",
                        w[0]
                    ),
                    "rules",
                    "",
                );
            }
        }
        Ok(())
    }
}
