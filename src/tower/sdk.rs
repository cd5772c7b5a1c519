//! `tollgate_sdk_decisions_total{sdk, outcome}`: the layer's decisions segmented by client SDK
//! version (feature `metrics`), so that operators can tell one SDK version's retry storm from
//! real growth. On only when the profile lists `observability.sdk_versions`; the label is the
//! listed token the `User-Agent` names, `other` or `none` ([`SdkMatcher`]), so a population of
//! clients creates at most `listed + 2` label values.

use metrics::{counter, Counter};

use crate::decision::Outcome;
use crate::http::{SdkLabel, SdkMatcher};
use crate::profile::Profile;

/// One label's counters, by [`Outcome::index`] (each counting under its `outcome` label).
type ByOutcome = [Counter; Outcome::COUNT];

/// The matcher and the counters of one profile, registered when the profile is compiled.
pub(super) struct SdkCounters {
    matcher: SdkMatcher,
    listed: Box<[ByOutcome]>,
    other: ByOutcome,
    none: ByOutcome,
}

fn by_outcome(sdk: &str) -> ByOutcome {
    Outcome::ALL.map(|o| {
        counter!("tollgate_sdk_decisions_total", "sdk" => sdk.to_owned(), "outcome" => o.label())
    })
}

impl SdkCounters {
    /// The counters of `profile`, or `None` when it lists no SDK version.
    pub(super) fn new(profile: &Profile) -> Option<SdkCounters> {
        let matcher = SdkMatcher::compile(&profile.observability.sdk_versions)?;
        Some(SdkCounters {
            listed: matcher.labels().map(by_outcome).collect(),
            other: by_outcome("other"),
            none: by_outcome("none"),
            matcher,
        })
    }

    /// Counts the decision the profile computed for a request with these headers.
    pub(super) fn record(&self, headers: &::http::HeaderMap, outcome: Outcome) {
        let group = match self.matcher.classify(headers) {
            SdkLabel::Listed(i) => &self.listed[i],
            SdkLabel::Other => &self.other,
            SdkLabel::None => &self.none,
        };
        group[outcome.index()].increment(1);
    }
}
