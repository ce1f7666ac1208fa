//! Kubernetes resource quantities (`100m`, `1.5Gi`, `2e3`), read exactly as the API server
//! reads them, and written back in a canonical form.
//!
//! One parser for the whole operator: discovery sums Node capacity with it, the sandbox
//! admission probe divides ResourceQuota headroom by a Pod template's requests with it.
//! `tests/quantity.rs` holds it against Kubernetes' own parser
//! (`k8s.io/apimachinery/pkg/api/resource`, built by `e2e/quantity`) on several hundred
//! generated quantities.
//!
//! Why not a crate: `kube_quantity` 0.9 reads the number through an `f64` (so digits past
//! the 16th are lost and `0.1` is not exact), refuses a fraction before `E` (`0.5E`),
//! does not round below 1n the way the API server does, and its comparison can panic on
//! overflow; on the generated set it disagreed with the API server on 211 of 600
//! quantities.

/// An exact quantity, held in nano-units (10⁻⁹ of the base unit: cores, bytes, pods), the
/// finest precision Kubernetes keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Quantity(i128);

/// Nano-units in one unit.
pub const NANOS_PER_UNIT: i128 = 1_000_000_000;

/// The API server caps binary-suffixed quantities (`Ki` … `Ei`) at 2⁶³ − 1 units.
const BINARY_MAX_UNITS: i128 = i64::MAX as i128;

impl Quantity {
    /// The quantity of `nanos` nano-units.
    pub const fn from_nanos(nanos: i128) -> Self {
        Self(nanos)
    }

    /// The quantity in nano-units (`1` is 1n; `1_000_000_000` is one core, byte or pod).
    pub const fn nanos(self) -> i128 {
        self.0
    }

    /// The sum, or `None` when it does not fit.
    pub fn checked_add(self, other: Self) -> Option<Self> {
        self.0.checked_add(other.0).map(Self)
    }

    /// The difference, or `None` when it does not fit.
    pub fn checked_sub(self, other: Self) -> Option<Self> {
        self.0.checked_sub(other.0).map(Self)
    }

    /// How many whole `each` fit in this quantity (`None` unless `each` is positive; 0 when
    /// this quantity is not).
    pub fn times(self, each: Self) -> Option<i128> {
        (each.0 > 0).then(|| (self.0 / each.0).max(0))
    }
}

/// Parses a Kubernetes quantity: an optional sign, digits with an optional fraction (either
/// part may be empty: `.5`, `1.`, even `-` is zero, as Kubernetes reads them), then a
/// decimal suffix `n u m k M G T P E`, a binary suffix `Ki Mi Gi Ti Pi Ei`, or a decimal
/// exponent `e<n>` / `E<n>`. `None` for anything else (including surrounding whitespace),
/// and for decimal values whose magnitude exceeds about 1.7·10²⁹ units (Kubernetes keeps
/// those).
///
/// Like Kubernetes, precision finer than 1n is rounded away from zero (`1e-10` is 1n), and
/// a binary-suffixed value is capped at 2⁶³ − 1 units.
pub fn parse(s: &str) -> Option<Quantity> {
    if s.is_empty() {
        return None;
    }
    let bytes = s.as_bytes();
    let (negative, mut i) = match bytes.first() {
        Some(b'-') => (true, 1),
        Some(b'+') => (false, 1),
        _ => (false, 0),
    };
    let digits_from = |from: usize| {
        from + bytes[from..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count()
    };
    let int_end = digits_from(i);
    let int_digits = &s[i..int_end];
    i = int_end;
    let mut frac_digits = "";
    if bytes.get(i) == Some(&b'.') {
        let frac_end = digits_from(i + 1);
        frac_digits = &s[i + 1..frac_end];
        i = frac_end;
    }
    // Everything before `i` is ASCII, so this slice starts on a character boundary.
    let (binary_power, decimal_exponent) = suffix(&s[i..])?;
    // Kubernetes reads a number without digits as 0 where its fast integer path applies
    // (`e3`, `-`, `.Ki`), and refuses it on its arbitrary-precision path (`Pi`, `e-10`).
    if int_digits.is_empty()
        && frac_digits.is_empty()
        && (binary_power > 4 || decimal_exponent < -9)
    {
        return None;
    }
    let magnitude = magnitude(int_digits, frac_digits, binary_power, decimal_exponent)?;
    Some(Quantity(if negative { -magnitude } else { magnitude }))
}

/// `int.frac × 1024^binary_power × 10^decimal_exponent` in nano-units, rounded up below 1n
/// and capped like Kubernetes.
fn magnitude(int: &str, frac: &str, binary_power: u32, decimal_exponent: i64) -> Option<i128> {
    // Leading zeros of the integer and trailing zeros of the fraction change nothing;
    // dropping them keeps the mantissa small.
    let int = int.trim_start_matches('0');
    let frac = frac.trim_end_matches('0');
    let mut mantissa: i128 = 0;
    for b in int.bytes().chain(frac.bytes()) {
        mantissa = mantissa
            .checked_mul(10)?
            .checked_add(i128::from(b - b'0'))?;
    }
    if mantissa == 0 {
        return Some(0);
    }
    // nanos = mantissa × 1024^binary_power × 10^(9 + exponent − fraction digits)
    let frac_len = i64::try_from(frac.len()).unwrap_or(i64::MAX);
    let exp10 = 9_i64
        .saturating_add(decimal_exponent)
        .saturating_sub(frac_len);
    let binary = if binary_power > 0 {
        // The cap makes any larger binary value the same, so saturate rather than fail.
        mantissa.saturating_mul(1_i128 << (10 * binary_power))
    } else {
        mantissa
    };
    let nanos = if exp10 >= 0 {
        let factor = 10_i128.checked_pow(u32::try_from(exp10).ok()?);
        match (factor.and_then(|f| binary.checked_mul(f)), binary_power) {
            (Some(n), _) => n,
            (None, 0) => return None,
            (None, _) => i128::MAX,
        }
    } else {
        match u32::try_from(exp10.unsigned_abs())
            .ok()
            .and_then(|e| 10_i128.checked_pow(e))
        {
            Some(divisor) if binary % divisor == 0 => binary / divisor,
            // Round away from zero, as Kubernetes does below 1n.
            Some(divisor) => binary / divisor + 1,
            // The divisor exceeds anything `binary` can hold: a non-zero value below 1n.
            None => 1,
        }
    };
    if binary_power > 0 {
        Some(nanos.min(BINARY_MAX_UNITS * NANOS_PER_UNIT))
    } else {
        Some(nanos)
    }
}

/// A quantity suffix as `(binary power of 1024, decimal exponent)`.
fn suffix(s: &str) -> Option<(u32, i64)> {
    let decimal = |e| Some((0, e));
    match s {
        "" => decimal(0),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => Some((1, 0)),
        "Mi" => Some((2, 0)),
        "Gi" => Some((3, 0)),
        "Ti" => Some((4, 0)),
        "Pi" => Some((5, 0)),
        "Ei" => Some((6, 0)),
        _ => {
            let rest = s.strip_prefix(['e', 'E'])?;
            let (negative, digits) = match rest.as_bytes().first() {
                Some(b'-') => (true, &rest[1..]),
                Some(b'+') => (false, &rest[1..]),
                _ => (false, rest),
            };
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            // Any exponent beyond ±10⁶ gives the same answer (overflow, or 1n), so saturate.
            let exponent = digits.bytes().fold(0_i64, |acc, b| {
                (acc * 10 + i64::from(b - b'0')).min(1_000_000)
            });
            decimal(if negative { -exponent } else { exponent })
        }
    }
}

/// Canonical text of a quantity of `resource`: byte-valued resources (`memory`,
/// `ephemeral-storage`, `hugepages-*`) in the largest of `Ti`, `Gi`, `Mi`, `Ki` that divides
/// them exactly, else in bytes; everything else (cpu, pods) as a whole number when exact,
/// else in `m`, `u` or `n`. The text parses back to the same quantity.
pub fn format(resource: &str, q: Quantity) -> String {
    let bytes_valued = resource == "memory"
        || resource == "ephemeral-storage"
        || resource.starts_with("hugepages-");
    if bytes_valued && q.0 % NANOS_PER_UNIT == 0 {
        let bytes = q.0 / NANOS_PER_UNIT;
        if bytes != 0 {
            for (shift, suffix) in [(40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki")] {
                let unit = 1_i128 << shift;
                if bytes % unit == 0 {
                    return format!("{}{suffix}", bytes / unit);
                }
            }
        }
        return bytes.to_string();
    }
    for (unit, suffix) in [(NANOS_PER_UNIT, ""), (1_000_000, "m"), (1_000, "u")] {
        if q.0 % unit == 0 {
            return format!("{}{suffix}", q.0 / unit);
        }
    }
    format!("{}n", q.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(n: i128) -> Option<Quantity> {
        Some(Quantity::from_nanos(n * NANOS_PER_UNIT))
    }

    #[test]
    fn what_kubernetes_reads_and_this_parser_too() {
        let cases: Vec<(&str, Option<Quantity>)> = vec![
            ("100m", Some(Quantity::from_nanos(100_000_000))),
            ("1.5", Some(Quantity::from_nanos(1_500_000_000))),
            ("1Ki", units(1024)),
            ("1.5Gi", units(3 << 29)),
            ("2e3", units(2000)),
            ("1E", units(1_000_000_000_000_000_000)),
            ("1e-10", Some(Quantity::from_nanos(1))),
            ("-1e-10", Some(Quantity::from_nanos(-1))),
            (".5", Some(Quantity::from_nanos(500_000_000))),
            ("1.", units(1)),
            ("-", units(0)),
            (".", units(0)),
            ("+0.000", units(0)),
            ("007", units(7)),
            // The binary cap.
            ("8Ei", units(i128::from(i64::MAX))),
            ("", None),
            (" 1", None),
            ("1 ", None),
            ("1.2.3", None),
            ("1KB", None),
            ("1e", None),
            ("e3", units(0)),
            ("Pi", None),
            ("+e-10", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text), want, "{text:?}");
        }
    }

    #[test]
    fn the_canonical_form_reads_back_the_same() {
        for (resource, text, want) in [
            ("memory", "1536Mi", "1536Mi"),
            ("memory", "1.5Gi", "1536Mi"),
            ("memory", "1000", "1000"),
            ("cpu", "1500m", "1500m"),
            ("cpu", "2", "2"),
            ("cpu", "1e-9", "1n"),
            ("pods", "110", "110"),
        ] {
            let q = parse(text).unwrap_or_else(|| panic!("{text}"));
            let canonical = format(resource, q);
            assert_eq!(canonical, want, "{text}");
            assert_eq!(parse(&canonical), Some(q));
        }
    }

    #[test]
    fn how_many_fit() {
        let q = |s| parse(s).unwrap_or_default();
        assert_eq!(q("1").times(q("300m")), Some(3));
        assert_eq!(q("-1").times(q("300m")), Some(0));
        assert_eq!(q("1").times(q("0")), None);
    }
}
