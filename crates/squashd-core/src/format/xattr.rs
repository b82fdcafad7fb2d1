//! Extended attribute keys and values as stored in the key/value stream.

use super::{ByteReader, FormatError};

/// Size of a key before its name.
pub const KEY_FIXED_SIZE: usize = 4;
/// Size of a value's length word.
pub const VALUE_SIZE_FIELD: usize = 4;
/// Flag in a key's type: the value is a reference to a value stored elsewhere.
pub const OUT_OF_LINE: u16 = 0x0100;
/// Largest value accepted (the kernel's XATTR_SIZE_MAX).
pub const MAX_VALUE_SIZE: u32 = 65_536;

/// The fixed part of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XattrKey {
    /// Namespace prefix ("user.", "trusted.", "security.").
    pub prefix: &'static str,
    /// Whether the value is stored out of line (the value is then a u64 reference).
    pub out_of_line: bool,
    /// Length of the name (without prefix) that follows.
    pub name_size: u16,
}

impl XattrKey {
    /// Parses the 4-byte fixed part of a key.
    pub fn parse(buf: &[u8]) -> Result<Self, FormatError> {
        let mut r = ByteReader::new(buf);
        let t = r.u16()?;
        let prefix = match t & 0xff {
            0 => "user.",
            1 => "trusted.",
            2 => "security.",
            other => {
                return Err(FormatError::invalid(format!(
                    "xattr of unknown namespace {other}"
                )))
            }
        };
        if t & !(0xff | OUT_OF_LINE) != 0 {
            return Err(FormatError::invalid(format!("xattr key type {t:#x}")));
        }
        Ok(XattrKey {
            prefix,
            out_of_line: t & OUT_OF_LINE != 0,
            name_size: r.u16()?,
        })
    }
}

/// Parses a value's 4-byte size and checks it.
pub fn parse_value_size(buf: &[u8]) -> Result<u32, FormatError> {
    let size = ByteReader::new(buf).u32()?;
    if size > MAX_VALUE_SIZE {
        return Err(FormatError::invalid(format!(
            "xattr value of {size} bytes (at most {MAX_VALUE_SIZE})"
        )));
    }
    Ok(size)
}
