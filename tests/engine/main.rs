//! The engine: limiter, buckets against the reference model, shared capacity, profiles, bad
//! input, metrics, stress and the fuzz corpora. One test binary, so that it links once.

mod bad_input;
mod capacity;
mod coarse_clock;
mod crafted_snapshot;
mod fuzz_corpus;
mod key_flood;
mod limiter;
mod model;
mod near_limit;
mod pinned;
mod profile;
mod profile_descriptors;
mod profile_hostile;
mod profile_observability;
mod profile_valid;
mod reload;
mod restart;
mod state_file;
mod stress;
mod telemetry;
