//! The client SDK from outside: backoff, Retry-After parsing, the retry loop, the tower layer
//! around hyper's client, and the metrics. One test binary, so that it links once.

mod backoff;
mod hyper;
mod layer;
mod retry;
mod retry_after;
mod server_date;
mod telemetry;
