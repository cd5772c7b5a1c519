//! Charging a request's descriptors all or nothing.
//!
//! INTERIM, until the engine's weighted, all-or-nothing `Admission::admit_all` is merged:
//! each descriptor of cost 1 or more is admitted once (a cost above 1 is charged as 1) and one
//! of cost 0 is not charged; a refusal does not give back what the descriptors before it took.

use tollgate::{Admission, Decision, Key};

/// The descriptor that refused a request, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused {
    /// Its index among the charged items.
    pub index: usize,
    /// Its refusal (never `Admit`).
    pub decision: Decision,
}

/// Admits every `(key, cost)` or refuses at the first that does not admit.
pub async fn admit_all<A: Admission>(backend: &A, items: &[(Key<'_>, u32)]) -> Result<(), Refused> {
    for (index, (key, cost)) in items.iter().enumerate() {
        if *cost == 0 {
            continue;
        }
        let decision = backend.admit(key).await;
        if !decision.is_admit() {
            return Err(Refused { index, decision });
        }
    }
    Ok(())
}
