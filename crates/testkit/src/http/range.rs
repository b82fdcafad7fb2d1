//! The request headers that choose what the [`super::FaultServer`] answers: `Range` and
//! `If-Match`, read as RFC 9110 says.

use std::ops::Range;

/// Whether an `If-Match` value admits `etag`: `*`, or one of its tags by strong comparison
/// (weak tags never match).
pub(crate) fn if_match(value: &str, etag: &str) -> bool {
    value.trim() == "*" || value.split(',').any(|tag| tag.trim() == etag)
}

/// What a Range header asks for, for an object of `len` bytes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Asked {
    /// No usable range: the whole object, with 200.
    Whole,
    /// One satisfiable range, clamped to the object.
    Part(Range<u64>),
    /// A range that starts past the end: 416.
    Unsatisfiable,
}

/// Reads `bytes=a-b`, `bytes=a-` and `bytes=-n`; other units, several ranges and malformed values
/// are ignored (answered with the whole object), which RFC 9110 allows a server to do.
pub(crate) fn parse_range(value: &str, len: u64) -> Asked {
    let Some(spec) = value
        .get(..6)
        .filter(|unit| unit.eq_ignore_ascii_case("bytes="))
        .and_then(|_| value.get(6..))
    else {
        return Asked::Whole;
    };
    let Some((first, last)) = spec.trim().split_once('-') else {
        return Asked::Whole;
    };
    if spec.contains(',') {
        return Asked::Whole;
    }
    let (first, last) = (first.trim(), last.trim());
    if first.is_empty() {
        // A suffix: the last n bytes.
        return match last.parse::<u64>() {
            Ok(0) => Asked::Unsatisfiable,
            Ok(_) if len == 0 => Asked::Unsatisfiable,
            Ok(n) => Asked::Part(len.saturating_sub(n)..len),
            Err(_) => Asked::Whole,
        };
    }
    let Ok(start) = first.parse::<u64>() else {
        return Asked::Whole;
    };
    let end = if last.is_empty() {
        len
    } else {
        match last.parse::<u64>() {
            Ok(l) if l >= start => l.saturating_add(1).min(len),
            _ => return Asked::Whole,
        }
    };
    if start >= len {
        return Asked::Unsatisfiable;
    }
    Asked::Part(start..end)
}

#[cfg(test)]
mod tests {
    use super::{parse_range, Asked};

    #[test]
    fn ranges_are_read_as_rfc_9110_says() {
        assert_eq!(parse_range("bytes=0-9", 100), Asked::Part(0..10));
        assert_eq!(parse_range("bytes=90-200", 100), Asked::Part(90..100));
        assert_eq!(parse_range("bytes=10-", 100), Asked::Part(10..100));
        assert_eq!(parse_range("bytes=-30", 100), Asked::Part(70..100));
        assert_eq!(parse_range("bytes=-300", 100), Asked::Part(0..100));
        assert_eq!(parse_range("bytes=100-", 100), Asked::Unsatisfiable);
        assert_eq!(parse_range("bytes=-0", 100), Asked::Unsatisfiable);
        assert_eq!(parse_range("bytes=0-0", 0), Asked::Unsatisfiable);
        assert_eq!(parse_range("bytes=5-4", 100), Asked::Whole);
        assert_eq!(parse_range("bytes=0-1,5-6", 100), Asked::Whole);
        assert_eq!(parse_range("items=0-1", 100), Asked::Whole);
        assert_eq!(parse_range("bytes=x-1", 100), Asked::Whole);
    }
}
