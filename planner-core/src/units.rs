//! Human-readable byte sizes (`4GiB`, `512MiB`, `1.5GB`, `1048576`).

use crate::error::{Error, Result};

/// One gibibyte (2^30 bytes); the seeds' "4 GB" memory caps are 4 GiB.
pub const GIB: u64 = 1 << 30;

/// Parses a byte size: a plain integer (bytes) or a number followed by a unit
/// (`B`, `KB`/`KiB`, `MB`/`MiB`, `GB`/`GiB`, `TB`/`TiB`; decimal units are powers of 1000,
/// binary ones powers of 1024; case-insensitive). `field` names the input in the error.
pub fn parse_bytes(field: &str, text: &str) -> Result<u64> {
    let bad = |why: &str| Error::field("size", field, format!("{text:?}"), why.to_string());
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(bad("expected a number of bytes, e.g. 4GiB, 512MiB or 1073741824"));
    }
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" | "k" => 1_000,
        "kib" => 1 << 10,
        "mb" | "m" => 1_000_000,
        "mib" => 1 << 20,
        "gb" | "g" => 1_000_000_000,
        "gib" => GIB,
        "tb" | "t" => 1_000_000_000_000,
        "tib" => 1 << 40,
        _ => return Err(bad("unknown unit; use B, KB, KiB, MB, MiB, GB, GiB, TB or TiB")),
    };
    let expected = "expected a number of bytes, e.g. 4GiB, 512MiB or 1073741824";
    let too_big = "at most 18446744073709551615 bytes (2^64 - 1, 16 EiB)";
    let bytes = if num.contains('.') {
        let value: f64 = num.parse().map_err(|_| bad(expected))?;
        let bytes = (value * mult as f64).round();
        // 2^64 as f64 is exact; every float below it converts to u64 without saturating.
        if !bytes.is_finite() || bytes >= 18_446_744_073_709_551_616.0 {
            return Err(bad(too_big));
        }
        bytes as u64
    } else {
        // Whole numbers exactly: a digit string past u64 (or whose product with the unit is) is refused.
        let value: u64 = num.parse().map_err(|_| bad(too_big))?;
        value.checked_mul(mult).ok_or_else(|| bad(too_big))?
    };
    if bytes < 1 {
        return Err(bad("must be at least 1 byte"));
    }
    Ok(bytes)
}

/// Formats bytes with a binary unit, e.g. `3.75 GiB`.
#[must_use]
pub fn format_bytes(bytes: u64) -> String {
    let b = bytes as f64;
    if bytes >= GIB {
        format!("{:.2} GiB", b / GIB as f64)
    } else if bytes >= 1 << 20 {
        format!("{:.1} MiB", b / f64::from(1u32 << 20))
    } else if bytes >= 1 << 10 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{bytes} B")
    }
}

/// Formats bytes for a message where the exact count matters: `23.46 GiB (25,193,800,000 bytes)`;
/// counts under 1 KiB are exact already (`512 B`).
#[must_use]
pub fn format_bytes_exact(bytes: u64) -> String {
    if bytes < 1 << 10 {
        format_bytes(bytes)
    } else {
        format!("{} ({} bytes)", format_bytes(bytes), group_digits(bytes))
    }
}

/// `65536` as `65,536`.
#[must_use]
pub fn group_digits(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expected: Option<u64>) {
        assert_eq!(parse_bytes("--mem", text).ok(), expected, "{text}");
    }

    #[test]
    fn formats_exact_counts_with_grouped_digits() {
        assert_eq!(format_bytes_exact(512), "512 B");
        assert_eq!(format_bytes_exact(25_193_800_000), "23.46 GiB (25,193,800,000 bytes)");
        assert_eq!(format_bytes_exact(u64::MAX), "17179869184.00 GiB (18,446,744,073,709,551,615 bytes)");
        assert_eq!(group_digits(0), "0");
        assert_eq!(group_digits(100), "100");
        assert_eq!(group_digits(1000), "1,000");
    }

    #[test]
    fn parses_units() {
        check("4GiB", Some(4 * GIB));
        check("512MiB", Some(512 << 20));
        check("1073741824", Some(GIB));
        check("1.5gb", Some(1_500_000_000));
        check(" 2 GiB ", Some(2 * GIB));
        check("0", None); // a zero cap can hold nothing
        check("-1GiB", None);
        check("4XB", None);
        check("GiB", None);
        check("", None);
    }

    #[test]
    fn sizes_past_64_bits_are_refused_not_saturated() {
        check("18446744073709551615", Some(u64::MAX));
        for text in ["18446744073709551616", "99999999999999999999999", "99999999999TiB", "16777216TiB"] {
            let e = parse_bytes("--mem", text).map_err(|e| e.to_string());
            assert!(
                e.as_ref().is_err_and(|e| e.contains(text) && (e.contains("at most") || e.contains("expected"))),
                "{text}: {e:?}"
            );
        }
        assert!(parse_bytes("--mem", "20000000000000000000.0").unwrap_err().to_string().contains("at most"));
        check("16777215TiB", Some(16_777_215 << 40));
    }

    #[test]
    fn error_names_field_and_value() {
        let e = parse_bytes("--mem", "4 parsecs").unwrap_err().to_string();
        assert!(e.contains("--mem") && e.contains("4 parsecs"), "{e}");
    }
}
