//! The profile's `descriptors:` rules, compiled: which key a descriptor is charged to.
//!
//! Compiled once per profile (start and every reload): route classes become handles, so a
//! request does no lookup by class name unless a rule takes the class from an entry.

use std::net::IpAddr;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate::profile::{DescriptorRule, Unmatched};
use tollgate::{Key, Profile, RouteClass};

/// The rules of one profile, ready to match descriptors.
#[derive(Debug)]
pub struct Mapping {
    domain: String,
    unknown_domain: Unmatched,
    unmatched: Unmatched,
    rules: Vec<Rule>,
    /// Class names in handle order, for `class_from`.
    classes: Vec<String>,
}

#[derive(Debug)]
struct Rule {
    when: Vec<(String, String)>,
    who: Who,
    class: ClassFrom,
}

#[derive(Debug)]
enum Who {
    Authenticated { tenant: String, principal: String },
    Anonymous(String),
}

#[derive(Debug)]
enum ClassFrom {
    Fixed(RouteClass),
    Entry(String),
}

/// Why a descriptor cannot be mapped: the request is malformed for these rules. The texts
/// name entry keys (the operator's configuration), never an entry's value (a caller's id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapError(pub String);

/// What one descriptor is.
#[derive(Debug, PartialEq, Eq)]
pub enum Mapped<'a> {
    /// Charged to this key; `rule` is the index of the rule that matched.
    Key {
        /// The key.
        key: Key<'a>,
        /// The index of the matching rule in `descriptors.rules`.
        rule: usize,
    },
    /// No rule matches.
    Unmatched,
}

impl Mapping {
    /// The profile's rules, or why the profile cannot serve Envoy (it has no `descriptors:`).
    pub fn new(profile: &Profile) -> Result<Mapping, String> {
        let d = profile.descriptors.as_ref().ok_or_else(|| {
            "the profile has no `descriptors:` section: tollgate-server needs its domain and \
             rules (see the guide, `tollgate::guide::envoy`)"
                .to_owned()
        })?;
        let class = |name: &str| {
            profile
                .route_classes
                .position(name)
                .map(|i| RouteClass::from_index(i as u32))
        };
        let rules = d
            .rules
            .iter()
            .map(|r| compile(r, &class))
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Mapping {
            domain: d.domain.as_str().to_owned(),
            unknown_domain: d.unknown_domain,
            unmatched: d.unmatched,
            rules,
            classes: profile
                .route_classes
                .iter()
                .map(|(k, _)| k.to_owned())
                .collect(),
        })
    }

    /// The domain served.
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// Whether a request for another domain is refused (else it is answered OK).
    pub fn refuses_unknown_domain(&self) -> bool {
        self.unknown_domain == Unmatched::Refuse
    }

    /// Whether a descriptor no rule matches refuses the request (else it is not limited).
    pub fn refuses_unmatched(&self) -> bool {
        self.unmatched == Unmatched::Refuse
    }

    /// The name of a route class handle.
    pub fn class_name(&self, class: RouteClass) -> &str {
        self.classes
            .get(class.index() as usize)
            .map_or("", String::as_str)
    }

    /// The key of a descriptor with these entries: the first rule that matches. A matching
    /// rule whose entries cannot make a key (an empty tenant, an address that is none) is a
    /// malformed request, not a miss: the caller learns which entry, by key.
    pub fn map<'a>(&self, entries: &'a [Entry]) -> Result<Mapped<'a>, MapError> {
        for (i, rule) in self.rules.iter().enumerate() {
            let matches = rule
                .when
                .iter()
                .all(|(k, v)| value(entries, k).is_some_and(|got| got == v));
            if !matches {
                continue;
            }
            let class = match &rule.class {
                ClassFrom::Fixed(c) => *c,
                ClassFrom::Entry(k) => {
                    let Some(name) = value(entries, k) else {
                        continue;
                    };
                    match self.classes.iter().position(|c| c == name) {
                        Some(i) => RouteClass::from_index(i as u32),
                        // A value naming no class is this rule's miss (it may be another's).
                        None => continue,
                    }
                }
            };
            let key = match &rule.who {
                Who::Authenticated { tenant, principal } => {
                    let (Some(t), Some(p)) = (value(entries, tenant), value(entries, principal))
                    else {
                        continue;
                    };
                    Key::authenticated(t, p, class).map_err(|e| {
                        MapError(format!(
                            "descriptor entries {tenant:?} and {principal:?} (rule {i}): {e}"
                        ))
                    })?
                }
                Who::Anonymous(k) => {
                    let Some(addr) = value(entries, k) else {
                        continue;
                    };
                    let ip: IpAddr = addr.parse().map_err(|_| {
                        MapError(format!(
                            "descriptor entry {k:?} (rule {i}) is not an IP address"
                        ))
                    })?;
                    Key::anonymous(ip, class)
                }
            };
            return Ok(Mapped::Key { key, rule: i });
        }
        Ok(Mapped::Unmatched)
    }
}

/// The value of the first entry named `key`.
fn value<'a>(entries: &'a [Entry], key: &str) -> Option<&'a str> {
    entries
        .iter()
        .find(|e| e.key == key)
        .map(|e| e.value.as_str())
}

fn compile(
    r: &DescriptorRule,
    class: &impl Fn(&str) -> Option<RouteClass>,
) -> Result<Rule, String> {
    let who = match (&r.tenant, &r.principal, &r.anonymous) {
        (Some(t), Some(p), None) => Who::Authenticated {
            tenant: t.as_str().to_owned(),
            principal: p.as_str().to_owned(),
        },
        (None, None, Some(a)) => Who::Anonymous(a.as_str().to_owned()),
        // `Profile::validate` refuses every other shape.
        _ => return Err("a descriptor rule names neither a tenant nor an address".into()),
    };
    let class = match (&r.class, &r.class_from) {
        (Some(c), None) => ClassFrom::Fixed(
            class(c).ok_or_else(|| format!("descriptor rule names unknown class {c:?}"))?,
        ),
        (None, Some(k)) => ClassFrom::Entry(k.as_str().to_owned()),
        _ => return Err("a descriptor rule names no route class".into()),
    };
    Ok(Rule {
        when: r
            .when
            .iter()
            .map(|(k, v)| (k.to_owned(), v.clone()))
            .collect(),
        who,
        class,
    })
}
