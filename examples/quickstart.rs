//! The smallest useful program: load the example profile, admit one caller until it is
//! throttled, and print what a 429 would say.
//!
//! `cargo run --release --example quickstart`

use tollgate::{Decision, Key, Limiter, Profile};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "examples/profiles/example.yaml".into());
    let profile = Profile::from_path(&path)?;
    let limiter = Limiter::builder(profile).build()?;
    println!(
        "profile {:?}: {} identity slots, {} bytes",
        limiter.profile().name,
        limiter.capacity(),
        limiter.memory_bytes()
    );

    let write = limiter
        .route_class("write")
        .ok_or("the profile has no `write` class")?;
    let key = Key::authenticated("acme", "alice", write)?;
    for n in 1.. {
        match limiter.admit(&key) {
            Decision::Admit => println!("request {n:>2}: admitted"),
            refused => {
                let profile = limiter.profile();
                println!(
                    "request {n:>2}: {} {}, Retry-After: {} (exact wait {:?})",
                    refused.http_status(),
                    refused.catalog_code(&profile).unwrap_or("-"),
                    refused
                        .retry_after_secs(profile.retry_after.max.get())
                        .map_or("-".into(), |s| s.to_string()),
                    refused.retry_after(),
                );
                break;
            }
        }
    }
    let anon = Key::anonymous(
        "203.0.113.9".parse()?,
        limiter.route_class("read").ok_or("no read class")?,
    );
    println!(
        "anonymous 203.0.113.0/24 on read: {:?}",
        limiter.admit(&anon)
    );
    Ok(())
}
