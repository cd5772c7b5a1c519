//! The fuzz checks' input reader: a byte at a time, little-endian, zeros once the input is used
//! up (so that every input, however short, decodes to something). Each check adds what it
//! decodes on top (`impl Bytes` in its own module).

pub(crate) struct Bytes<'a>(pub(crate) &'a [u8]);

impl<'a> Bytes<'a> {
    pub(crate) fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }

    pub(crate) fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    /// The next `n` bytes, or as many as are left.
    pub(crate) fn take(&mut self, n: usize) -> &'a [u8] {
        let (s, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        s
    }
}
