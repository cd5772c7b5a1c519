//! Reading a fuzz input (on the shared byte reader, `fuzz::bytes`): the bucket specs it picks
//! (token counts that divide 1000), and the profile they make.

use crate::fuzz::bytes::Bytes;

/// Token counts that divide 1000: every whole-millisecond period is then whole microseconds per
/// token, the Redis backend's resolution.
pub(super) const TOKENS: [u64; 10] = [1, 2, 4, 5, 8, 10, 20, 25, 40, 50];
/// (burst tokens, burst ms, sustained tokens, sustained ms)
pub(super) type Spec = (u64, u64, u64, u64);

impl Bytes<'_> {
    pub(super) fn spec(&mut self) -> Spec {
        (
            TOKENS[usize::from(self.u8()) % TOKENS.len()],
            1 + u64::from(self.u8()),
            TOKENS[usize::from(self.u8()) % TOKENS.len()],
            1 + u64::from(self.u16() % 2_000),
        )
    }
}

pub(super) fn yaml(specs: &[Spec; 2], capacity: Option<(u64, u64)>) -> String {
    let mut src = String::from(
        "name: diff\nidentities: { capacity: 4096, tenant_share: 1.0 }\nroute_classes:\n",
    );
    for (i, (bt, bp, st, sp)) in specs.iter().enumerate() {
        src += &format!(
            "  c{i}:\n    burst: {{ tokens: {bt}, per: {bp}ms }}\n    sustained: {{ tokens: {st}, per: {sp}ms }}\n"
        );
    }
    if let Some((window, slots)) = capacity {
        src += &format!(
            "shared_capacity: {{ shards: 1, window: {window}ms, slots_per_window: {slots}, tenant_share: 1.0 }}\n"
        );
    }
    src
}
