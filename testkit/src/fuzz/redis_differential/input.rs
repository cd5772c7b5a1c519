//! Reading a fuzz input: a little-endian byte reader that yields zeros once the input is used
//! up, the bucket specs it picks (token counts that divide 1000), and the profile they make.

/// Token counts that divide 1000: every whole-millisecond period is then whole microseconds per
/// token, the Redis backend's resolution.
pub(super) const TOKENS: [u64; 10] = [1, 2, 4, 5, 8, 10, 20, 25, 40, 50];
/// (burst tokens, burst ms, sustained tokens, sustained ms)
pub(super) type Spec = (u64, u64, u64, u64);

pub(super) struct Bytes<'a>(pub(super) &'a [u8]);

impl Bytes<'_> {
    pub(super) fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    pub(super) fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
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
