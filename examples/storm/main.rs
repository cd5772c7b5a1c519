//! A retry storm on loopback, with and without the client SDK: 200 clients start together on
//! one identity of the demo gateway (example profile: `read` burst 50 per second), and the table
//! shows admitted requests, 429s, attempts, amplification, eventual success, abandonment and
//! time to recover.
//!
//! `cargo run --release --example storm [clients]`

#[path = "../gateway/app.rs"]
#[allow(dead_code)]
mod app;
mod storm;

use std::time::Duration;

use tollgate::Profile;

#[tokio::main]
async fn main() {
    let clients = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    let profile = Profile::from_path("examples/profiles/example.yaml").expect("example profile");
    let mut rows = Vec::new();
    for (name, sdk) in [("naive (retry at once)", false), ("tollgate SDK", true)] {
        // A fresh gateway per run, so that both start from full buckets.
        let addr = storm::start_gateway(profile.clone()).await;
        let report = storm::run(
            addr,
            storm::Storm {
                clients,
                sdk,
                max_attempts: 10,
                deadline: Duration::from_secs(8),
            },
        )
        .await;
        rows.push((name, report));
    }
    let rows: Vec<(&str, &storm::Report)> = rows.iter().map(|(n, r)| (*n, r)).collect();
    println!("{clients} clients, one identity, GET /v1/items (read: burst 50/s)\n");
    print!("{}", storm::table(&rows));
}
