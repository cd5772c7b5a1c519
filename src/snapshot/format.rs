//! The snapshot file format, version 2: its constants, and the two ends of it (a writer that
//! checksums what it writes, a reader that checksums what it reads and tells a truncated file
//! by where it ended). All integers are little-endian.
//!
//! ```text
//! header   magic "\x7fTGSNAP\n" (8) · version u32 · slots u64 (identities.capacity)
//!          · fingerprint [16] (keyed hash of the key secret, never the secret)
//!          · ipv4_prefix u8 · ipv6_prefix u8
//!          · classes u16, then per class: name length u8 · name (handle order)
//!            · burst t u64 · sustained t u64 (the emission intervals, in ns, the debts are
//!              counted in: a restore under other limits converts them in tokens)
//!          · wall u64 (ns since the Unix epoch at the reference instant)
//!          · header CRC-32 u32 (of the header bytes before it)
//! records  per identity that was not full, by ascending slot index, 54 bytes each:
//!          slot u32 · class u16 (index in the header's classes; 0xFFFF not known)
//!          · digest hi u64 · lo u64 · partition hi u64 · lo u64
//!          · burst debt u64 · sustained debt u64   (ns until full, at the reference instant)
//! end      marker u32 = 0xFFFF_FFFF · records u64 · CRC-32 u32 (of every byte before it)
//! ```
//!
//! Version 1 (still read) has neither the intervals nor the record's class (52-byte records):
//! its debts are restored as they are, in time.

use std::io::{self, Read, Write};

use super::SnapshotError;
use crate::identity::Digest;

pub(crate) const MAGIC: [u8; 8] = *b"\x7fTGSNAP\n";
/// The version this build writes; it reads every version from 1 to this one.
pub(crate) const VERSION: u32 = 2;
/// A record's class when the snapshot does not know it (an identity restored from a version 1
/// file and not charged since, or of a class a reload added while the snapshot was taken).
pub(crate) const NO_CLASS: u16 = u16::MAX;
/// Where the records end (no slot index is this large: `MAX_CAPACITY` is 2^30).
pub(crate) const END: u32 = u32::MAX;
const _: () = assert!(crate::profile::MAX_CAPACITY < END as u64);
/// The most a bucket can be owed: one full bucket of the largest profile (a TAT runs at most
/// `tau < per + tokens` ahead of the clock), or what a reload's conversion of a debt to a
/// slower class leaves, at most `DEBT_CAP` (see `bucket.rs` and `table/state.rs`).
pub(crate) const MAX_DEBT: u64 = crate::bucket::DEBT_CAP;

/// What the header records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) version: u32,
    pub(crate) slots: u64,
    pub(crate) fingerprint: [u8; 16],
    pub(crate) prefixes: (u8, u8),
    pub(crate) classes: Vec<String>,
    /// Per class, the burst's and the sustained bucket's emission intervals (ns) the debts
    /// are counted in; empty in version 1.
    pub(crate) intervals: Vec<[u64; 2]>,
    pub(crate) wall: u64,
}

/// One identity: its slot, digest, partition and what each bucket owes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) slot: u32,
    /// Its route class, an index in the header's classes (`None`: not known).
    pub(crate) class: Option<u16>,
    pub(crate) digest: Digest,
    pub(crate) partition: Digest,
    pub(crate) burst: u64,
    pub(crate) sustained: u64,
}

/// Bytes of a record after its slot index and class.
const RECORD_REST: usize = 48;

/// A writer that checksums and counts what it writes.
pub(crate) struct Output<W: Write> {
    inner: io::BufWriter<W>,
    crc: crc32fast::Hasher,
    pub(crate) bytes: u64,
}

impl<W: Write> Output<W> {
    pub(crate) fn new(w: W) -> Self {
        Output {
            inner: io::BufWriter::with_capacity(1 << 16, w),
            crc: crc32fast::Hasher::new(),
            bytes: 0,
        }
    }

    fn put(&mut self, b: &[u8]) -> io::Result<()> {
        self.crc.update(b);
        self.bytes += b.len() as u64;
        self.inner.write_all(b)
    }

    pub(crate) fn header(&mut self, h: &Header) -> io::Result<()> {
        debug_assert_eq!(h.intervals.len(), h.classes.len());
        let mut b = Vec::with_capacity(64 + 81 * h.classes.len());
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&h.slots.to_le_bytes());
        b.extend_from_slice(&h.fingerprint);
        b.extend_from_slice(&[h.prefixes.0, h.prefixes.1]);
        let count = u16::try_from(h.classes.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "too many route classes"))?;
        b.extend_from_slice(&count.to_le_bytes());
        for (name, [burst, sustained]) in h.classes.iter().zip(&h.intervals) {
            // Profile names are 1 to 64 bytes (`MAX_NAME_LEN`).
            let len = u8::try_from(name.len())
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "class name too long"))?;
            b.push(len);
            b.extend_from_slice(name.as_bytes());
            b.extend_from_slice(&burst.to_le_bytes());
            b.extend_from_slice(&sustained.to_le_bytes());
        }
        b.extend_from_slice(&h.wall.to_le_bytes());
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        self.put(&b)
    }

    pub(crate) fn record(&mut self, r: &Record) -> io::Result<()> {
        let mut b = [0u8; 6 + RECORD_REST];
        b[0..4].copy_from_slice(&r.slot.to_le_bytes());
        b[4..6].copy_from_slice(&r.class.unwrap_or(NO_CLASS).to_le_bytes());
        for (i, v) in [
            r.digest.hi,
            r.digest.lo,
            r.partition.hi,
            r.partition.lo,
            r.burst,
            r.sustained,
        ]
        .into_iter()
        .enumerate()
        {
            b[6 + 8 * i..14 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        self.put(&b)
    }

    /// Writes the end (marker, count, checksum) and flushes; the bytes written in all.
    pub(crate) fn finish(mut self, records: u64) -> io::Result<u64> {
        self.put(&END.to_le_bytes())?;
        self.put(&records.to_le_bytes())?;
        let crc = self.crc.clone().finalize();
        self.put(&crc.to_le_bytes())?;
        self.inner.flush()?;
        Ok(self.bytes)
    }
}

/// A reader that checksums what it reads and knows how far it got.
pub(crate) struct Input<R: Read> {
    inner: io::BufReader<R>,
    crc: crc32fast::Hasher,
    pub(crate) offset: u64,
    /// The header's version, once read: the records' layout.
    version: u32,
}

impl<R: Read> Input<R> {
    pub(crate) fn new(r: R) -> Self {
        Input {
            inner: io::BufReader::with_capacity(1 << 16, r),
            crc: crc32fast::Hasher::new(),
            offset: 0,
            version: VERSION,
        }
    }

    /// Exactly `buf.len()` bytes, or `Truncated` where the input ended.
    fn take(&mut self, buf: &mut [u8]) -> Result<(), SnapshotError> {
        let mut got = 0;
        while got < buf.len() {
            match self.inner.read(&mut buf[got..]) {
                Ok(0) => {
                    return Err(SnapshotError::Truncated {
                        offset: self.offset + got as u64,
                    })
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(SnapshotError::Io(e)),
            }
        }
        self.crc.update(buf);
        self.offset += buf.len() as u64;
        Ok(())
    }

    fn u8(&mut self, h: &mut Vec<u8>) -> Result<u8, SnapshotError> {
        let mut b = [0; 1];
        self.take(&mut b)?;
        h.extend_from_slice(&b);
        Ok(b[0])
    }

    fn bytes<const N: usize>(&mut self, h: &mut Vec<u8>) -> Result<[u8; N], SnapshotError> {
        let mut b = [0; N];
        self.take(&mut b)?;
        h.extend_from_slice(&b);
        Ok(b)
    }

    /// The header, its magic, version and checksum checked (what it says is the caller's to
    /// judge).
    pub(crate) fn header(&mut self) -> Result<Header, SnapshotError> {
        let mut h = Vec::new();
        let mut magic = [0u8; 8];
        let mut got = 0;
        while got < magic.len() {
            match self.inner.read(&mut magic[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(SnapshotError::Io(e)),
            }
        }
        // Shorter than the magic: a snapshot cut short only if what is there begins it.
        if magic[..got] != MAGIC[..got] {
            return Err(SnapshotError::NotASnapshot);
        }
        if got < magic.len() {
            return Err(SnapshotError::Truncated { offset: got as u64 });
        }
        self.crc.update(&magic);
        self.offset = 8;
        h.extend_from_slice(&magic);
        let version = u32::from_le_bytes(self.bytes(&mut h)?);
        if !(1..=VERSION).contains(&version) {
            return Err(SnapshotError::UnsupportedVersion {
                found: version,
                supported: VERSION,
            });
        }
        let slots = u64::from_le_bytes(self.bytes(&mut h)?);
        let fingerprint = self.bytes::<16>(&mut h)?;
        let prefixes = (self.u8(&mut h)?, self.u8(&mut h)?);
        let count = u16::from_le_bytes(self.bytes(&mut h)?);
        let (mut classes, mut intervals) = (Vec::new(), Vec::new());
        for _ in 0..count {
            let len = usize::from(self.u8(&mut h)?);
            let mut name = vec![0; len];
            self.take(&mut name)?;
            h.extend_from_slice(&name);
            // Not UTF-8 is corrupt, and the checksum below says so first if it is.
            classes.push(String::from_utf8_lossy(&name).into_owned());
            if version >= 2 {
                let burst = u64::from_le_bytes(self.bytes(&mut h)?);
                intervals.push([burst, u64::from_le_bytes(self.bytes(&mut h)?)]);
            }
        }
        let wall = u64::from_le_bytes(self.bytes(&mut h)?);
        let expected = crc32fast::hash(&h);
        let found = u32::from_le_bytes(self.bytes(&mut Vec::new())?);
        if expected != found {
            return Err(SnapshotError::Corrupt {
                part: "header",
                offset: self.offset - 4,
            });
        }
        self.version = version;
        Ok(Header {
            version,
            slots,
            fingerprint,
            prefixes,
            classes,
            intervals,
            wall,
        })
    }

    /// The next record, or `None` at the end marker.
    pub(crate) fn record(&mut self) -> Result<Option<Record>, SnapshotError> {
        let mut slot = [0; 4];
        self.take(&mut slot)?;
        let slot = u32::from_le_bytes(slot);
        if slot == END {
            return Ok(None);
        }
        let class = match self.version {
            1 => None,
            _ => {
                let mut c = [0; 2];
                self.take(&mut c)?;
                Some(u16::from_le_bytes(c)).filter(|&c| c != NO_CLASS)
            }
        };
        let mut b = [0u8; RECORD_REST];
        self.take(&mut b)?;
        let v = |i: usize| u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().expect("8 bytes"));
        Ok(Some(Record {
            slot,
            class,
            digest: Digest { hi: v(0), lo: v(1) },
            partition: Digest { hi: v(2), lo: v(3) },
            burst: v(4),
            sustained: v(5),
        }))
    }

    /// After the end marker: the record count, then the checksum of everything before it,
    /// checked; then nothing more.
    pub(crate) fn end(&mut self) -> Result<u64, SnapshotError> {
        let mut count = [0; 8];
        self.take(&mut count)?;
        let expected = self.crc.clone().finalize();
        let mut crc = [0; 4];
        self.take(&mut crc)?;
        if u32::from_le_bytes(crc) != expected {
            return Err(SnapshotError::Corrupt {
                part: "file",
                offset: self.offset - 4,
            });
        }
        let mut more = [0; 1];
        loop {
            match self.inner.read(&mut more) {
                Ok(0) => break,
                Ok(_) => {
                    return Err(SnapshotError::Malformed {
                        offset: self.offset,
                        what: "bytes after the end of the snapshot".into(),
                    })
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(SnapshotError::Io(e)),
            }
        }
        Ok(u64::from_le_bytes(count))
    }
}
