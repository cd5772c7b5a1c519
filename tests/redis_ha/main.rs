//! The Redis backend on replicated topologies, against real servers on loopback that each test
//! starts and kills: a 3+3 Redis Cluster (feature `redis-cluster`) and a primary, a replica and
//! three Sentinels (feature `redis-sentinel`). Both need `redis-server` and `redis-cli`
//! (`apt-get install redis-server`); without them the tests fail, saying so.
#![cfg(any(feature = "redis-cluster", feature = "redis-sentinel"))]

mod fleet;
mod load;

#[cfg(feature = "redis-cluster")]
mod cluster;
#[cfg(feature = "redis-sentinel")]
mod sentinel;
