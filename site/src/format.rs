//! Display of the estimator's figures: each in the binary unit that fits it (B, KiB, MiB, GiB,
//! TiB...), the exact bytes on hover; round axis ticks. Pure.

/// Bytes in a gibibyte.
pub const GIB: f64 = (1u64 << 30) as f64;

const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];

/// `bytes` in the largest binary unit it holds at least one of: whole bytes below 1 KiB, else
/// one decimal from 100 of the unit, two below (three significant digits at least):
/// `512 B`, `11.92 KiB`, `108.5 MiB`, `18.08 GiB`, `150.0 TiB`.
pub fn bytes(bytes: u64) -> String {
    let (v, unit) = scaled(bytes);
    if unit == 0 {
        format!("{bytes} B")
    } else if v >= 100.0 {
        format!("{v:.1} {}", UNITS[unit])
    } else {
        format!("{v:.2} {}", UNITS[unit])
    }
}

/// `bytes` as a value below 1024 of `UNITS[unit]`.
fn scaled(bytes: u64) -> (f64, usize) {
    let (mut v, mut unit) = (bytes as f64, 0);
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    (v, unit)
}

/// Round ticks for an axis from 0 to `top` bytes: multiples of 1, 2 or 5 x 10^k of the unit
/// that fits `top`, at most `most` of them (at least 1), each with its label (`5 GiB`,
/// `2.5 MiB` never: `2 MiB`, `4 MiB`...). Empty for `top` 0.
pub fn ticks(top: u64, most: usize) -> Vec<(u64, String)> {
    if top == 0 {
        return Vec::new();
    }
    let (v, unit) = scaled(top);
    let size = (1u64 << (10 * unit as u32)) as f64;
    let rough = v / most.max(1) as f64;
    let power = 10f64.powf(rough.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * power).find(|&s| s >= rough).unwrap_or(10.0 * power);
    let decimals = if step >= 1.0 { 0 } else { (-step.log10().floor()) as usize };
    (1..)
        .map(|i| i as f64 * step)
        .take_while(|&t| t <= v * (1.0 + 1e-9))
        .map(|t| ((t * size).round() as u64, format!("{t:.decimals$} {}", UNITS[unit])))
        .collect()
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
    fn bytes_take_the_unit_that_fits() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(512), "512 B", "was 0.000000477 GiB");
        assert_eq!(bytes(12_800), "12.50 KiB", "was 0.0000119 GiB");
        assert_eq!(bytes(113_770_086), "108.5 MiB");
        assert_eq!(bytes(1 << 30), "1.00 GiB");
        assert_eq!(bytes(19_413_938_996), "18.08 GiB");
        assert_eq!(bytes(150_754_820_096), "140.4 GiB");
        assert_eq!(bytes(1023 << 30), "1023.0 GiB");
        assert_eq!(bytes(1 << 40), "1.00 TiB");
        assert_eq!(bytes(302_343_783 << 30), "288.3 PiB", "was 302343783.0 GiB");
        assert_eq!(bytes(150 << 40), "150.0 TiB");
        assert_eq!(bytes(u64::MAX), "16.00 EiB");
    }

    #[test]
    fn ticks_are_round() {
        // the bars' scale of 27.1 GiB once read 9.03 / 18.07 / 27.10 GiB
        let t = ticks(29_100_000_000, 4);
        let labels: Vec<&str> = t.iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(labels, ["10 GiB", "20 GiB"]);
        assert_eq!(t[0].0, 10 << 30);
        let labels: Vec<String> = ticks(60 << 20, 4).into_iter().map(|(_, l)| l).collect();
        assert_eq!(labels, ["20 MiB", "40 MiB", "60 MiB"]);
        let labels: Vec<String> = ticks(3 << 29, 4).into_iter().map(|(_, l)| l).collect();
        assert_eq!(labels, ["0.5 GiB", "1.0 GiB", "1.5 GiB"]);
        assert_eq!(ticks(900, 4), [(500, "500 B".to_string())]);
        assert!(ticks(0, 4).is_empty());
        assert!(ticks(u64::MAX, 4).len() <= 4);
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
