//! What a SIF descriptor says in numbers, in words: pkg/sif's `FSType`, `PartType`, `DataType`
//! and architecture codes, and the partitions they describe.

/// A partition's file system (`FSType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsType {
    /// SquashFS (1).
    Squashfs,
    /// ext3 (2), deprecated.
    Ext3,
    /// An immutable object archive (3).
    Archive,
    /// Raw data (4).
    Raw,
    /// SquashFS encrypted with dm-crypt (5).
    EncryptedSquashfs,
    /// SquashFS holding gocryptfs-encrypted files (6).
    GocryptfsSquashfs,
    /// A value this version does not know.
    Other(i32),
}

impl FsType {
    pub(super) fn from_raw(v: i32) -> Self {
        match v {
            1 => FsType::Squashfs,
            2 => FsType::Ext3,
            3 => FsType::Archive,
            4 => FsType::Raw,
            5 => FsType::EncryptedSquashfs,
            6 => FsType::GocryptfsSquashfs,
            other => FsType::Other(other),
        }
    }

    /// How it is called in messages and `squashd info`.
    pub fn name(self) -> String {
        match self {
            FsType::Squashfs => "SquashFS".into(),
            FsType::Ext3 => "ext3".into(),
            FsType::Archive => "archive".into(),
            FsType::Raw => "raw data".into(),
            FsType::EncryptedSquashfs => "encrypted SquashFS".into(),
            FsType::GocryptfsSquashfs => "gocryptfs SquashFS".into(),
            FsType::Other(v) => format!("unknown file system {v}"),
        }
    }
}

/// What a partition is for (`PartType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartType {
    /// An operating system (1).
    System,
    /// The primary operating system (2): what Apptainer runs.
    PrimarySystem,
    /// Data only (3).
    Data,
    /// An overlay (4).
    Overlay,
    /// A value this version does not know.
    Other(i32),
}

impl PartType {
    pub(super) fn from_raw(v: i32) -> Self {
        match v {
            1 => PartType::System,
            2 => PartType::PrimarySystem,
            3 => PartType::Data,
            4 => PartType::Overlay,
            other => PartType::Other(other),
        }
    }

    /// How it is called in messages and `squashd info`.
    pub fn name(self) -> String {
        match self {
            PartType::System => "system".into(),
            PartType::PrimarySystem => "primary system".into(),
            PartType::Data => "data".into(),
            PartType::Overlay => "overlay".into(),
            PartType::Other(v) => format!("unknown type {v}"),
        }
    }
}

/// One partition a SIF file's descriptor table lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SifPartition {
    /// Its descriptor id, by which it is chosen.
    pub id: u32,
    /// Its name, control characters escaped.
    pub name: String,
    /// Its file system.
    pub fs: FsType,
    /// What it is for.
    pub kind: PartType,
    /// Its architecture as Go names it (`amd64`), or `unknown`.
    pub arch: &'static str,
    /// Where it starts in the file.
    pub offset: u64,
    /// Its length in bytes.
    pub size: u64,
}

impl SifPartition {
    /// `3 ("rootfs", SquashFS)`: how messages name it.
    pub(super) fn label(&self) -> String {
        format!("{} ({:?}, {})", self.id, self.name, self.fs.name())
    }
}

/// A NUL-padded name; control characters are escaped, so that printing it cannot drive a
/// terminal.
pub(super) fn name(raw: &[u8]) -> String {
    let raw = raw.split(|&b| b == 0).next().unwrap_or(&[]);
    String::from_utf8_lossy(raw)
        .chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}

/// A descriptor's data type (`DataType`) in words.
pub(super) fn data_type(kind: i32) -> String {
    match kind {
        0x4001 => "a definition file".into(),
        0x4002 => "environment variables".into(),
        0x4003 => "JSON labels".into(),
        0x4004 => "a partition".into(),
        0x4005 => "a signature".into(),
        0x4006 => "generic JSON".into(),
        0x4007 => "generic data".into(),
        0x4008 => "a cryptographic message".into(),
        0x4009 => "an SBOM".into(),
        0x400a => "an OCI root index".into(),
        0x400b => "an OCI blob".into(),
        other => format!("data of unknown type {other:#x}"),
    }
}

/// The architecture code of pkg/sif's arch.go as Go names it.
pub(super) fn arch(code: &[u8]) -> &'static str {
    const NAMES: [&str; 13] = [
        "386", "amd64", "arm", "arm64", "ppc64", "ppc64le", "mips", "mipsle", "mips64", "mips64le",
        "s390x", "riscv64", "loong64",
    ];
    let number = match code {
        [a @ b'0'..=b'9', b @ b'0'..=b'9', 0] => usize::from((a - b'0') * 10 + (b - b'0')),
        _ => 0,
    };
    number
        .checked_sub(1)
        .and_then(|i| NAMES.get(i))
        .copied()
        .unwrap_or("unknown")
}
