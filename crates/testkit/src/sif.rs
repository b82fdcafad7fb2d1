//! A writer of Apptainer SIF files, from the layout github.com/apptainer/sif publishes
//! (`pkg/sif`: `header`, `rawDescriptor`, `partition`, written by Go's `encoding/binary`:
//! packed, little-endian), laid out as its `CreateContainer` lays them: a 128-byte header, a
//! table of 48 descriptors of 585 bytes at byte 4096, then the objects, partitions aligned to
//! 4096 bytes. Tests build SIF files with it (and, where `siftool` is installed, check that
//! siftool reads them alike), then damage fields with [`Sif::poke_i64`] for hostile cases.
//!
//! ```no_run
//! use testkit::sif::{self, Object};
//! let image = std::fs::read("rootfs.sqfs").unwrap();
//! let built = sif::build(&[
//!     Object::deffile("Bootstrap: scratch\n"),
//!     Object::partition("rootfs", sif::FS_SQUASHFS, sif::PART_PRIMSYS, image),
//! ]);
//! std::fs::write("app.sif", &built.bytes).unwrap();
//! ```

/// `DataDeffile`: a definition file object.
pub const DATA_DEFFILE: i32 = 0x4001;
/// `DataPartition`: a file system object.
pub const DATA_PARTITION: i32 = 0x4004;
/// `DataGeneric`: raw data.
pub const DATA_GENERIC: i32 = 0x4007;
/// `FsSquash`.
pub const FS_SQUASHFS: i32 = 1;
/// `FsExt3`.
pub const FS_EXT3: i32 = 2;
/// `FsEncryptedSquashfs`.
pub const FS_ENCRYPTED_SQUASHFS: i32 = 5;
/// `PartSystem`.
pub const PART_SYSTEM: i32 = 1;
/// `PartPrimSys`: the partition Apptainer runs.
pub const PART_PRIMSYS: i32 = 2;
/// `PartData`.
pub const PART_DATA: i32 = 3;

/// The header's length.
pub const HEADER_LEN: usize = 128;
/// One descriptor's length.
pub const DESCRIPTOR_LEN: usize = 585;
/// Where the header keeps the descriptor count (int64).
pub const HEADER_TOTAL: usize = 88;
/// Where the header keeps the descriptor table's offset (int64).
pub const HEADER_TABLE_OFFSET: usize = 96;
/// Where the header keeps the descriptor table's size (int64).
pub const HEADER_TABLE_SIZE: usize = 104;
/// Where a descriptor keeps its id (uint32).
pub const DESCRIPTOR_ID: usize = 5;
/// Where a descriptor keeps its object's offset (int64).
pub const DESCRIPTOR_OFFSET: usize = 17;
/// Where a descriptor keeps its object's size (int64).
pub const DESCRIPTOR_SIZE: usize = 25;

const TABLE_AT: usize = 4096;
const CAPACITY: usize = 48;
/// `descrGroupMask`: group ids are stored with these bits set.
const GROUP_MASK: u32 = 0xf000_0000;

/// One data object to write.
pub struct Object {
    /// Its data type (`DATA_*`).
    pub data_type: i32,
    /// Its name (at most 128 bytes).
    pub name: String,
    /// For a partition: file system (`FS_*`), partition type (`PART_*`), architecture code
    /// (`"02"` is amd64).
    pub partition: Option<(i32, i32, [u8; 2])>,
    /// Its bytes.
    pub data: Vec<u8>,
}

impl Object {
    /// A definition file.
    pub fn deffile(text: &str) -> Object {
        Object {
            data_type: DATA_DEFFILE,
            name: "deffile".into(),
            partition: None,
            data: text.as_bytes().to_vec(),
        }
    }

    /// An amd64 partition of file system `fs` and type `part`.
    pub fn partition(name: &str, fs: i32, part: i32, data: Vec<u8>) -> Object {
        Object {
            data_type: DATA_PARTITION,
            name: name.into(),
            partition: Some((fs, part, *b"02")),
            data,
        }
    }
}

/// Where an object was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    /// Its descriptor id (1, 2, ... in the order given).
    pub id: u32,
    /// Its offset in the file.
    pub offset: u64,
    /// Its length.
    pub size: u64,
}

/// A SIF file in memory.
pub struct Sif {
    /// The file's bytes.
    pub bytes: Vec<u8>,
    /// Where each object went, in the order given.
    pub placed: Vec<Placed>,
}

impl Sif {
    /// Where the descriptor of the `index`-th object (from 0) starts in the file.
    pub fn descriptor_at(index: usize) -> usize {
        TABLE_AT + index * DESCRIPTOR_LEN
    }

    /// Overwrites the little-endian int64 at byte `pos`.
    pub fn poke_i64(&mut self, pos: usize, v: i64) {
        self.bytes[pos..pos + 8].copy_from_slice(&v.to_le_bytes());
    }
}

/// Writes `objects` (at most 48) into a SIF file.
pub fn build(objects: &[Object]) -> Sif {
    assert!(objects.len() <= CAPACITY, "at most {CAPACITY} objects");
    let data_at = TABLE_AT + CAPACITY * DESCRIPTOR_LEN;
    let mut bytes = vec![0u8; data_at];
    let mut placed = Vec::new();
    for (i, object) in objects.iter().enumerate() {
        // Partitions start on a 4096-byte boundary, as pkg/sif aligns them by default.
        let offset = if object.partition.is_some() {
            bytes.len().next_multiple_of(4096)
        } else {
            bytes.len()
        };
        bytes.resize(offset, 0);
        bytes.extend_from_slice(&object.data);
        let id = i as u32 + 1;
        placed.push(Placed {
            id,
            offset: offset as u64,
            size: object.data.len() as u64,
        });
        let d = &mut bytes[Sif::descriptor_at(i)..Sif::descriptor_at(i + 1)];
        put(d, 0, &object.data_type.to_le_bytes());
        d[4] = 1; // used
        put(d, DESCRIPTOR_ID, &id.to_le_bytes());
        put(d, 9, &(1 | GROUP_MASK).to_le_bytes()); // the default object group
        put(d, DESCRIPTOR_OFFSET, &(offset as i64).to_le_bytes());
        put(
            d,
            DESCRIPTOR_SIZE,
            &(object.data.len() as i64).to_le_bytes(),
        );
        put(d, 33, &(object.data.len() as i64).to_le_bytes()); // size with padding
        assert!(object.name.len() <= 128, "names hold at most 128 bytes");
        put(d, 73, object.name.as_bytes());
        if let Some((fs, part, arch)) = object.partition {
            put(d, 201, &fs.to_le_bytes());
            put(d, 205, &part.to_le_bytes());
            put(d, 209, &arch);
        }
    }
    let h = &mut bytes[..HEADER_LEN];
    put(h, 0, b"#!/usr/bin/env run-singularity\n");
    put(h, 32, b"SIF_MAGIC\0");
    put(h, 42, b"01\0");
    let arch = objects
        .iter()
        .find_map(|o| o.partition.filter(|p| p.1 == PART_PRIMSYS))
        .map_or(*b"00", |p| p.2);
    put(h, 45, &arch);
    put(h, 48, &[0x5a; 16]); // the UUID
    put(h, 80, &((CAPACITY - objects.len()) as i64).to_le_bytes());
    put(h, HEADER_TOTAL, &(CAPACITY as i64).to_le_bytes());
    put(h, HEADER_TABLE_OFFSET, &(TABLE_AT as i64).to_le_bytes());
    put(
        h,
        HEADER_TABLE_SIZE,
        &((CAPACITY * DESCRIPTOR_LEN) as i64).to_le_bytes(),
    );
    put(h, 112, &(data_at as i64).to_le_bytes());
    let data_len = bytes.len() - data_at;
    put(
        &mut bytes[..HEADER_LEN],
        120,
        &(data_len as i64).to_le_bytes(),
    );
    Sif { bytes, placed }
}

fn put(buf: &mut [u8], at: usize, v: &[u8]) {
    buf[at..at + v.len()].copy_from_slice(v);
}
