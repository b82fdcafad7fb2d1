//! Finding the image in a container (an Apptainer SIF file, a type-2 AppImage, a raw image) on
//! arbitrary bytes, by default and with a partition asked for: an error or an offset with the
//! SquashFS magic inside the file, never a panic, a hang or a large allocation.

#![no_main]

use libfuzzer_sys::fuzz_target;
use squashd_core::container::locate;
use squashd_core::source::Source;

struct Bytes<'a>(&'a [u8]);

impl Source for Bytes<'_> {
    fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> std::io::Result<()> {
        let src = usize::try_from(pos)
            .ok()
            .and_then(|start| self.0.get(start..start.checked_add(buf.len())?))
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(src);
        Ok(())
    }

    fn len(&self) -> std::io::Result<u64> {
        Ok(self.0.len() as u64)
    }
}

fuzz_target!(|data: &[u8]| {
    for partition in [None, Some(1), Some(2), Some(3)] {
        if let Ok(found) = locate(&Bytes(data), partition) {
            let at = found.offset as usize;
            // A raw image is taken at byte 0 unchecked (the image parser checks it); a
            // container's offset must hold the magic.
            if found.offset > 0 {
                assert_eq!(data.get(at..at + 4), Some(&b"hsqs"[..]));
            }
        }
    }
});
