//! The wire protocol between the router and the shard servers (and between servers during a migration):
//! length-prefixed frames (tokio-util's `LengthDelimitedCodec`, a 4-byte big-endian length), each one
//! postcard-encoded [`Envelope`] carrying a request or response id, so that many calls share one connection.
//! Also the deterministic embedding values every read is checked against.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio_util::codec::LengthDelimitedCodec;

/// Largest frame accepted (a batch of migrated rows or an inventory page is far below it).
pub const MAX_FRAME_BYTES: usize = 64 << 20;
/// Rows per batch in loads, migration copies, deletes and inventory pages: 4 096 rows of dimension 64 are
/// 1 MiB of values, so one frame and one log record stay small while a migration needs few round trips.
pub const BATCH_ROWS: usize = 4096;
/// Rows per migration call (a pull or a delete): a migration moving more rows from one server sends
/// several calls in turn, so each request frame stays near 1 MiB of keys whatever the migration's size,
/// and each call's copying (16 batches) finishes well within a call's time limit (a destination's pulls
/// are sent one after the other, never queued behind each other at the server).
pub const MIGRATION_CALL_ROWS: usize = 16 * BATCH_ROWS;
/// Largest dimension (values per row) served: a batch of [`BATCH_ROWS`] rows (their values, their keys of at
/// most 15 bytes each as varints, and the envelope) must fit one frame, or a load or a migration copy could
/// never be sent and would only be retried until the control limit.
pub const MAX_DIM: usize = (MAX_FRAME_BYTES - BATCH_ROWS * 16 - 64) / (4 * BATCH_ROWS);

/// A row of an embedding table: (table id, row id), the stream's own identifiers.
pub type Key = (u32, u64);

/// One frame: a call id (chosen by the caller, echoed by the answer) and its body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope<T> {
    /// Call id.
    pub id: u64,
    /// Request or response.
    pub body: T,
}

/// What a shard server is asked to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// Read rows to serve a request routed with the routing table of `epoch`.
    Lookup {
        /// Routing epoch the caller used: a lookup older than a delete this server already applied means the
        /// router deleted before its readers were done (counted as a stale lookup; never expected).
        epoch: u64,
        /// Rows wanted.
        keys: Vec<Key>,
    },
    /// Read rows for a migration (another server copying them); not counted as serving.
    Read {
        /// Rows wanted.
        keys: Vec<Key>,
    },
    /// Store rows durably (the initial load): logged and synced before the answer.
    Put {
        /// Epoch the rows are written for (0 for the initial load).
        epoch: u64,
        /// Rows.
        keys: Vec<Key>,
        /// `keys.len() · dim` values, row after row.
        values: Vec<f32>,
    },
    /// Copy rows from another server (`source`, a socket address) and store them durably, for the routing
    /// table of `epoch`; answered once they are synced.
    Pull {
        /// Epoch whose routing places the rows here.
        epoch: u64,
        /// Address of the server that holds them now.
        source: String,
        /// Rows to copy.
        keys: Vec<Key>,
    },
    /// Delete the rows that the migration to `epoch` moved away: only copies written before `epoch` are
    /// deleted, so a stale or repeated delete never removes a row that came back later.
    Delete {
        /// Epoch of the migration that moved the rows away.
        epoch: u64,
        /// Rows.
        keys: Vec<Key>,
    },
    /// One page of the rows held, in key order: keys after `after` (from the start when `None`), at most
    /// `limit` of them, each with the hash of its values.
    Inventory {
        /// Last key of the previous page.
        after: Option<Key>,
        /// Most keys in the answer.
        limit: u32,
    },
    /// Health and counters.
    Ping,
}

/// What a shard server answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Response {
    /// Answer to `Lookup` and `Read`: the values of the rows held, in request order, and the positions (in
    /// the request) of the rows not held.
    Rows {
        /// `found · dim` values.
        values: Vec<f32>,
        /// Positions of the rows not held.
        missing: Vec<u32>,
    },
    /// Answer to `Put`, `Pull` and `Delete`: rows written or deleted, synced.
    Done {
        /// Rows written (Put, Pull) or deleted (Delete).
        rows: u64,
    },
    /// Answer to `Pull` when the source lacked rows: they were not copied (the rest was).
    SourceMissing {
        /// Rows copied.
        copied: u64,
        /// Rows the source did not hold.
        keys: Vec<Key>,
    },
    /// Answer to `Inventory`.
    Inventory {
        /// Keys in order.
        keys: Vec<Key>,
        /// [`values_hash`] of each row's values.
        hashes: Vec<u64>,
    },
    /// Answer to `Ping`.
    Pong(ServerStats),
    /// The request could not be served (bad request, source unreachable, storage failure).
    Error {
        /// What went wrong.
        message: String,
    },
}

/// A server's counters since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerStats {
    /// Rows held.
    pub rows: u64,
    /// Lookup calls served.
    pub lookups: u64,
    /// Rows asked for by lookups and not held.
    pub lookup_misses: u64,
    /// Lookups routed by an epoch older than the newest delete applied here (the router must drain every
    /// reader of an epoch before it deletes what that epoch's successor moved away).
    pub stale_lookups: u64,
    /// Batches of a copy refused because a newer migration had begun here (a copy whose caller timed out
    /// and asked again, still running): never written, so never a stray row.
    pub stale_copies: u64,
    /// Bytes of the log file.
    pub log_bytes: u64,
    /// Log records written and synced.
    pub syncs: u64,
    /// Bytes of a torn tail dropped when the log was recovered at start.
    pub torn_bytes: u64,
}

/// The codec of every connection.
#[must_use]
pub fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder().max_frame_length(MAX_FRAME_BYTES).new_codec()
}

/// Encodes one frame body.
pub fn encode<T: Serialize>(id: u64, body: &T) -> Result<Bytes, postcard::Error> {
    #[derive(Serialize)]
    struct Ref<'a, T> {
        id: u64,
        body: &'a T,
    }
    postcard::to_stdvec(&Ref { id, body }).map(Bytes::from)
}

/// Decodes one frame body.
pub fn decode<T: for<'de> Deserialize<'de>>(frame: &[u8]) -> Result<Envelope<T>, postcard::Error> {
    postcard::from_bytes(frame)
}

/// `SplitMix64`'s finaliser: a fast, well-mixed 64-bit hash step.
#[must_use]
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Component `i` of the embedding of `key`: deterministic, so the client checks every value it reads bit
/// for bit. Values lie in [-0.5, 0.5) with 23 random mantissa bits, and every row differs from every other.
#[must_use]
pub fn row_value(key: Key, i: usize) -> f32 {
    let h = mix64(mix64(key.1 ^ (u64::from(key.0) << 40)) ^ i as u64);
    f32::from_bits(0x3F80_0000 | (h >> 41) as u32) - 1.5
}

/// Appends the `dim` values of `key` to `out`.
pub fn fill_row(key: Key, dim: usize, out: &mut Vec<f32>) {
    out.extend((0..dim).map(|i| row_value(key, i)));
}

/// True when `got` is exactly (bit for bit) the embedding of `key`.
#[must_use]
pub fn row_matches(key: Key, got: &[f32]) -> bool {
    got.iter().enumerate().all(|(i, v)| v.to_bits() == row_value(key, i).to_bits())
}

/// A 64-bit hash of a row's values (their bits, in order): what an inventory reports, so that the values
/// at rest are checked without sending them.
#[must_use]
pub fn values_hash(values: &[f32]) -> u64 {
    values.iter().fold(0x243F_6A88_85A3_08D3, |h, v| mix64(h ^ u64::from(v.to_bits())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let req = Request::Put { epoch: 3, keys: vec![(1, 7), (0, u64::MAX)], values: vec![0.25, -0.5, 1e-30, 3.0] };
        let bytes = encode(42, &req).unwrap_or_else(|e| panic!("{e}"));
        let back: Envelope<Request> = decode(&bytes).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, Envelope { id: 42, body: req });
        // A truncated frame is an error, never a shorter message.
        assert!(decode::<Request>(&bytes[..bytes.len() - 1]).is_err());
    }

    #[test]
    fn values_are_deterministic_distinct_and_checked_bit_for_bit() {
        let mut a = Vec::new();
        fill_row((0, 5), 64, &mut a);
        let mut b = Vec::new();
        fill_row((0, 5), 64, &mut b);
        assert_eq!(
            a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            b.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        assert!(a.iter().all(|v| (-0.5..0.5).contains(v)));
        let mut c = Vec::new();
        fill_row((1, 5), 64, &mut c);
        assert_ne!(a, c, "the same row id in another table has other values");
        assert!(row_matches((0, 5), &a));
        assert!(!row_matches((1, 5), &a));
        // One flipped low bit is a wrong value.
        a[17] = f32::from_bits(a[17].to_bits() ^ 1);
        assert!(!row_matches((0, 5), &a));
        assert_ne!(values_hash(&a), values_hash(&b));
    }
}
