//! [`OrderedMap`]: the named entries of a profile (route classes, tenants) in the order the
//! profile lists them, with valid, distinct names.

use core::fmt;
use std::collections::HashSet;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use super::error::{value_error, ProfileError};

/// The longest name of a route class or tenant, in bytes.
pub const MAX_NAME_LEN: usize = 64;

/// A mapping that keeps the profile's order (route class handles follow it) and holds only
/// names of 1 to 64 bytes, each once: [`OrderedMap::insert`] refuses the others, as parsing
/// does.
#[derive(Clone, Debug, PartialEq)]
pub struct OrderedMap<V>(Vec<(String, V)>);

impl<V> Default for OrderedMap<V> {
    fn default() -> Self {
        OrderedMap(Vec::new())
    }
}

impl<V> OrderedMap<V> {
    /// An empty map.
    pub fn new() -> Self {
        OrderedMap::default()
    }

    /// Adds `name` at the end. Refused (kind `Invalid`, nothing added) if the name is empty,
    /// longer than 64 bytes, or already present.
    pub fn insert(&mut self, name: impl Into<String>, value: V) -> Result<(), ProfileError> {
        let name = name.into();
        self.check_new_name(&name)?;
        self.0.push((name, value));
        Ok(())
    }

    fn check_new_name(&self, name: &str) -> Result<(), ProfileError> {
        check_name(name)?;
        if self.get(name).is_some() {
            return Err(duplicate(name));
        }
        Ok(())
    }

    /// Removes the entry named `name`, keeping the order of the others.
    pub fn remove(&mut self, name: &str) -> Option<V> {
        let i = self.position(name)?;
        Some(self.0.remove(i).1)
    }

    /// The entry named `name`.
    pub fn get(&self, name: &str) -> Option<&V> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }
    /// The entry named `name`, to change it in place.
    pub fn get_mut(&mut self, name: &str) -> Option<&mut V> {
        self.0.iter_mut().find(|(k, _)| k == name).map(|(_, v)| v)
    }
    /// Position of `name` in profile order.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.0.iter().position(|(k, _)| k == name)
    }
    /// Entries in profile order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }
    /// Entries in profile order, values changeable (names are not: they stay valid).
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&str, &mut V)> {
        self.0.iter_mut().map(|(k, v)| (k.as_str(), v))
    }
    /// The entries in the order of `names`, which names each of them once.
    pub(crate) fn reorder(&mut self, names: &[String]) {
        self.0
            .sort_by_key(|(k, _)| names.iter().position(|n| n == k));
    }
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// True when there are no entries.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A name of 1 to [`MAX_NAME_LEN`] bytes.
fn check_name(name: &str) -> Result<(), ProfileError> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(ProfileError::invalid(format!(
            "invalid name {name:?}, expected 1 to {MAX_NAME_LEN} bytes"
        )));
    }
    Ok(())
}

fn duplicate(name: &str) -> ProfileError {
    ProfileError::invalid(format!("duplicate name {name:?}"))
}

impl<V: Serialize> Serialize for OrderedMap<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for OrderedMap<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct M<V>(core::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for M<V> {
            type Value = OrderedMap<V>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping of names")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
                let mut out = OrderedMap::new();
                // The names so far, hashed: `check_new_name` searches the list, which made a
                // mapping of many names quadratic.
                let mut seen = HashSet::new();
                while let Some(k) = m.next_key::<String>()? {
                    // The name is checked before its value is read, so that an error names
                    // the key, not something inside its value.
                    check_name(&k).map_err(value_error)?;
                    if seen.contains(k.as_str()) {
                        return Err(value_error(duplicate(&k)));
                    }
                    let v = m.next_value()?;
                    seen.insert(k.clone());
                    out.0.push((k, v));
                }
                Ok(out)
            }
        }
        d.deserialize_map(M(core::marker::PhantomData))
    }
}
