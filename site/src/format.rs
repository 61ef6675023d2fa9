//! Display of the estimator's figures: GiB on the page, the exact bytes on hover. Pure.

/// Bytes in a gibibyte.
pub const GIB: f64 = (1u64 << 30) as f64;

/// `bytes` in GiB: one decimal from 100 GiB, two from 0.1 GiB, three significant digits below;
/// from 1024 GiB in TiB, PiB or EiB (two decimals below 100 of them, one above).
pub fn gib(bytes: u64) -> String {
    let g = bytes as f64 / GIB;
    if g >= 1024.0 {
        let (mut v, mut unit) = (g / 1024.0, "TiB");
        for next in ["PiB", "EiB"] {
            if v >= 1024.0 {
                (v, unit) = (v / 1024.0, next);
            }
        }
        return if v >= 100.0 { format!("{v:.1} {unit}") } else { format!("{v:.2} {unit}") };
    }
    if bytes == 0 {
        "0 GiB".into()
    } else if g >= 100.0 {
        format!("{g:.1} GiB")
    } else if g >= 0.1 {
        format!("{g:.2} GiB")
    } else {
        let digits = (2 - g.log10().floor() as i32).clamp(0, 12) as usize;
        format!("{g:.digits$} GiB")
    }
}

/// The exact count with thousands separators: `1,073,741,824`.
pub fn grouped(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The hover text of a byte figure: `1,073,741,824 bytes`.
pub fn exact(bytes: u64) -> String {
    format!("{} bytes", grouped(bytes))
}

/// A parameter count in thousands to trillions: `26.8k`, `81.9M`, `1.10B`, `35.18T`.
pub fn params(n: u64) -> String {
    let v = n as f64;
    if v >= 1e12 {
        format!("{:.2}T", v / 1e12)
    } else if v >= 1e9 {
        format!("{:.2}B", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        n.to_string()
    }
}

/// A multiplier or fraction as typed: `1`, `0.5`, `0.25` (`-0` as `0`).
pub fn number(v: f64) -> String {
    format!("{}", v + 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gib_keeps_three_significant_digits() {
        assert_eq!(gib(0), "0 GiB");
        assert_eq!(gib(1 << 30), "1.00 GiB");
        assert_eq!(gib(19_413_938_996), "18.08 GiB");
        assert_eq!(gib(150_754_820_096), "140.4 GiB");
        assert_eq!(gib(33_554_432), "0.0312 GiB"); // 0.03125, half to even
        assert_eq!(gib(111_616), "0.000104 GiB");
        assert_eq!(gib(1023 << 30), "1023.0 GiB");
        assert_eq!(gib(1 << 40), "1.00 TiB");
        assert_eq!(gib(302_343_783 << 30), "288.3 PiB", "was 302343783.0 GiB");
        assert_eq!(gib(150 << 40), "150.0 TiB");
        assert_eq!(gib(u64::MAX), "16.00 EiB");
    }

    #[test]
    fn exact_bytes_are_grouped() {
        assert_eq!(exact(19_413_938_996), "19,413,938,996 bytes");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(u64::MAX), "18,446,744,073,709,551,615");
    }

    #[test]
    fn params_and_numbers() {
        assert_eq!(params(81_912_576), "81.9M");
        assert_eq!(params(1_100_048_384), "1.10B");
        assert_eq!(params(26_786), "26.8k");
        assert_eq!(params(35_184_372_088_832), "35.18T", "was 35184.37B");
        assert_eq!(number(1.0), "1");
        assert_eq!(number(0.25), "0.25");
    }
}
