//! The control socket's protocol: one JSON request per connection, one JSON response back.
//! Plain JSON over a Unix stream socket keeps the daemon scriptable (`socat`, `jq`).

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Where the daemon listens unless the config says otherwise.
pub const DEFAULT_SOCKET: &str = "/run/squashd/control.sock";

/// A request from `squashd attach|detach|status`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Mount an image.
    Attach {
        /// The image file (absolute).
        image: PathBuf,
        /// Where to mount it (absolute).
        mountpoint: PathBuf,
        /// Mount options as `squashd mount -o` takes them.
        options: Vec<String>,
    },
    /// Unmount an image.
    Detach {
        /// Its mount point.
        mountpoint: PathBuf,
        /// Detach even while busy (as `umount -l`).
        lazy: bool,
    },
    /// Report every image.
    Status,
}

/// The daemon's answer.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Response {
    /// The request was carried out.
    Ok {
        /// What was done.
        message: String,
    },
    /// The request failed.
    Error {
        /// Why, in one line.
        message: String,
    },
    /// The status report.
    Status(Box<Status>),
}

/// What every image costs and how it is doing.
#[derive(Debug, Serialize, Deserialize)]
pub struct Status {
    /// Process id of the daemon.
    pub pid: u32,
    /// Resident memory of the daemon, in bytes.
    pub rss_bytes: u64,
    /// Bytes of the FUSE over io_uring rings (buffers and queues, an upper bound: a payload
    /// page is resident only once a request used it) of the images shown: each FUSE mount's,
    /// and the kernel path's blob file system's once. 0 when no mount uses the ring.
    #[serde(default)]
    pub ring_memory_bytes: u64,
    /// The shared cache budget and its use.
    pub shared_cache: TierSet,
    /// One entry per attached image, sorted by mount point.
    pub images: Vec<ImageStatus>,
    /// The disk caches of the process's remote images (one per directory).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disk_caches: Vec<DiskCacheStatus>,
}

/// A disk cache of fetched units and its use.
#[derive(Debug, Serialize, Deserialize)]
pub struct DiskCacheStatus {
    /// Its directory.
    pub dir: PathBuf,
    /// Its budget in bytes.
    pub budget_bytes: u64,
    /// Bytes of its entries on disk.
    pub used_bytes: u64,
    /// Entries held.
    pub entries: u64,
    /// Units answered from it.
    pub hits: u64,
    /// Units looked for and not found.
    pub misses: u64,
    /// Entries found damaged (then fetched again).
    pub corrupt: u64,
    /// Entries removed to make room.
    pub evictions: u64,
    /// Entries that could not be written.
    pub write_errors: u64,
}

/// Budgets and use of the three cache tiers.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct TierSet {
    /// Decompressed metadata.
    pub metadata: Tier,
    /// Decompressed data and fragments.
    pub data: Tier,
    /// Compressed blocks.
    pub compressed: Tier,
}

/// One cache tier's figures.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Tier {
    /// Budget in bytes.
    pub capacity_bytes: u64,
    /// Bytes held (of the whole cache, shared or private).
    pub resident_bytes: u64,
    /// Hits (of this image, in an image's entry).
    pub hits: u64,
    /// Misses.
    pub misses: u64,
    /// Decompressions (loads).
    pub loads: u64,
    /// Failed loads: corrupt blocks or I/O errors.
    pub failures: u64,
    /// Hit ratio, 0..1.
    pub hit_ratio: f64,
}

/// One attached image.
#[derive(Debug, Serialize, Deserialize)]
pub struct ImageStatus {
    /// The image file.
    pub image: PathBuf,
    /// Where it is mounted.
    pub mountpoint: PathBuf,
    /// The options it was attached with.
    pub options: Vec<String>,
    /// "ok", or what is wrong (e.g. "image file truncated", "image file deleted").
    pub health: String,
    /// What the last request that failed with EIO was told: the image and what was wrong.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// What serves it: "fuse", or "kernel" (EROFS on a translated metadata image).
    #[serde(default)]
    pub engine: String,
    /// What carries its FUSE requests (on the kernel path, its blob file system's): "dev-fuse",
    /// or "io-uring" (FUSE over io_uring).
    #[serde(default)]
    pub transport: String,
    /// Bytes of the io_uring transport's buffers and rings (0 on /dev/fuse; on the kernel path,
    /// the blob file system's, shared by its mounts).
    #[serde(default)]
    pub ring_memory_bytes: u64,
    /// Ring entries of the io_uring transport registered with the kernel (0 on /dev/fuse): one
    /// per CPU while the mount is idle, more once it was busy.
    #[serde(default)]
    pub ring_entries: u64,
    /// Requests answered over the io_uring transport.
    #[serde(default)]
    pub ring_requests: u64,
    /// Of `ring_requests`, those answered on the CPU that issued them (no wake-up across CPUs).
    #[serde(default)]
    pub ring_local_requests: u64,
    /// Of `ring_requests`, those answered by the idle start's thread (pinned to no CPU).
    #[serde(default)]
    pub ring_idle_thread_requests: u64,
    /// For the kernel path: what translating the image gave and cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub translation: Option<TranslationStatus>,
    /// For a remote image: what fetching it has cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<RemoteStatus>,
    /// Whether its bytes are checked against a dm-verity tree, and how that goes (absent: not
    /// verified).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verity: Option<VerityStatus>,
    /// Reads of blocks that failed their verity hash (each gave EIO); 0 when not verified.
    #[serde(default)]
    pub verity_failures: u64,
    /// Size of the image in bytes.
    pub size_bytes: u64,
    /// Number of inodes.
    pub inodes: u32,
    /// Files and directories open through the mount now.
    pub open_handles: u64,
    /// Requests that failed with EIO (corrupt image, I/O error).
    pub errors: u64,
    /// Requests served (the kernel answers the rest from its caches); on the kernel path, the
    /// reads of file data that missed the kernel's page cache.
    #[serde(default)]
    pub requests: u64,
    /// Of the requests, listings (READDIR and READDIRPLUS); 0 on the kernel path.
    #[serde(default)]
    pub listing_requests: u64,
    /// Of the listings, those answered with one entry because the kernel had cached the
    /// listing by then (the requester read the rest from that cache).
    #[serde(default)]
    pub short_listings: u64,
    /// Of the READDIRPLUS answers, those given while another opener's answer was filling the
    /// kernel's cache of that listing: entries without attributes, which the kernel does not
    /// link (the other answer links them).
    #[serde(default)]
    pub unlinked_listings: u64,
    /// Of the listings, those that waited (over FUSE over io_uring) for another opener's
    /// listing of the same directory to fill the kernel's cache, and were then answered short.
    #[serde(default)]
    pub waited_listings: u64,
    /// Entries other than directories that listings gave without their attributes, as walks
    /// did not stat what they listed (the kernel made no inode for them).
    #[serde(default)]
    pub bare_entries: u64,
    /// Lookups of non-directories while listings were bare: past a share of the bare entries,
    /// listings give every entry's attributes again.
    #[serde(default)]
    pub late_lookups: u64,
    /// Bytes read from the image file.
    pub bytes_read: u64,
    /// Whether the image has a budget of its own instead of the shared one.
    pub private_cache: bool,
    /// This image's use of the caches.
    pub cache: TierSet,
    /// What read-ahead decompressed for this image's readers, and what became of it.
    #[serde(default)]
    pub read_ahead: ReadAheadStatus,
    /// Seconds since it was attached.
    pub attached_secs: u64,
}

/// Read-ahead of one image: blocks decompressed ahead of streaming readers, on either path.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ReadAheadStatus {
    /// Blocks decompressed ahead of a reader.
    pub loads: u64,
    /// Of them, blocks a reader then read.
    pub used: u64,
    /// Of them, blocks no reader read (evicted first, or the reader seeked away or closed).
    pub wasted: u64,
    /// Of them, blocks the reader has not reached yet.
    pub pending: u64,
    /// Streams read ahead of.
    pub streams: u64,
    /// Reads of a stream whose read-ahead was cut to one block per read-ahead thread because
    /// the CPUs were busy.
    pub busy_cuts: u64,
    /// Blocks of files read at random brought into the page cache beside their readers, on
    /// idle cores (the random sweep).
    #[serde(default)]
    pub swept: u64,
    /// Of them, blocks the reader asked for all the same (dropped from the page cache first).
    #[serde(default)]
    pub sweeps_wasted: u64,
    /// Random misses that swept nothing because the CPUs were busy.
    #[serde(default)]
    pub sweep_busy_skips: u64,
}

/// How an image is checked against its dm-verity tree.
#[derive(Debug, Serialize, Deserialize)]
pub struct VerityStatus {
    /// The root hash, in hex.
    pub root_hash: String,
    /// Where it came from: "the roothash option", a file beside the image, an xattr, a disk
    /// image's -verity-sig partition.
    pub root_hash_from: String,
    /// The subject of the trusted certificate that signed the root hash, if it was signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_by: Option<String>,
    /// Data blocks the tree covers.
    pub data_blocks: u64,
    /// Data blocks checked and found good so far.
    pub verified_blocks: u64,
    /// Hash blocks read from the tree and checked.
    pub hash_block_loads: u64,
    /// Data blocks hashed, counting each time (above `verified_blocks` only where two reads
    /// checked one block at once).
    #[serde(default)]
    pub data_block_hashes: u64,
    /// Hints given to the tree's file for a read's hash blocks ahead of its check.
    #[serde(default)]
    pub hash_hints: u64,
    /// Bytes of checked hash blocks held now in the metadata cache (within its budget).
    pub hash_cache_bytes: u64,
    /// Bytes of the bitmap of checked data blocks (taken from the metadata budget).
    pub bitmap_bytes: u64,
}

/// What fetching a remote image has cost.
#[derive(Debug, Serialize, Deserialize)]
pub struct RemoteStatus {
    /// The object's version pinned at open (its ETag, else its modification time and size).
    pub version: String,
    /// HTTP requests sent, retries included.
    pub requests: u64,
    /// Requests sent again after a transient failure.
    pub retries: u64,
    /// Fetches that failed for good (a reader got EIO).
    pub failures: u64,
    /// Bytes received.
    pub bytes_fetched: u64,
    /// Fetch units received, on demand or ahead.
    pub units_fetched: u64,
    /// Of those, units fetched ahead of readers.
    pub units_prefetched: u64,
    /// Unit reads answered from memory.
    pub memory_hits: u64,
    /// Unit reads answered from the disk cache.
    pub disk_cache_hits: u64,
    /// Seconds readers spent waiting on the network, summed over readers.
    pub wait_seconds: f64,
}

/// What translating an image for the kernel path gave and cost, and what reads of its file
/// data have done since.
#[derive(Debug, Serialize, Deserialize)]
pub struct TranslationStatus {
    /// Inodes of the EROFS metadata image.
    pub inodes: u64,
    /// Size of the metadata image (held in the daemon's memory).
    pub metadata_bytes: u64,
    /// Size of the blob of file data (virtual: decompressed on demand).
    pub blob_bytes: u64,
    /// How long the translation took.
    pub seconds: f64,
    /// Reads of the blob that reached squashd.
    #[serde(default)]
    pub blob_reads: u64,
    /// Of them, those EROFS made to fill whole blocks (the rest are readers' misses).
    #[serde(default)]
    pub fill_reads: u64,
    /// Blocks filled whole into EROFS's page cache: the rest of those a random read took part
    /// of, and those decompressed beside it by the sweep.
    #[serde(default)]
    pub fills: u64,
    /// Bytes those fills asked for.
    #[serde(default)]
    pub filled_bytes: u64,
    /// Fills that could not be asked for.
    #[serde(default)]
    pub fill_failures: u64,
    /// Blocks decompressed beside random readers by the sweep's workers, then filled whole
    /// into EROFS's page cache at the reader's next miss.
    #[serde(default)]
    pub sweep_decompressions: u64,
    /// Of them, blocks a reader came to first (found decompressed: a round trip, no wait
    /// for a decompression).
    #[serde(default)]
    pub swept_reached: u64,
    /// Bytes of the blob in the kernel's page cache (cachestat(2)): 0 by design, since EROFS
    /// reads the blob with direct I/O and keeps file data once, in its own page cache; null
    /// when the blob file system did not answer in time.
    #[serde(default)]
    pub blob_cached_bytes: Option<u64>,
}
