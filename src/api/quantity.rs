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
/// them exactly (up to 2⁶³ − 1 bytes, the API server's cap for those), else in bytes; everything else (cpu, pods) as a whole number when exact,
/// else in `m`, `u` or `n`. The text parses back to the same quantity.
pub fn format(resource: &str, q: Quantity) -> String {
    let bytes_valued = resource == "memory"
        || resource == "ephemeral-storage"
        || resource.starts_with("hugepages-");
    if bytes_valued && q.0 % NANOS_PER_UNIT == 0 {
        let bytes = q.0 / NANOS_PER_UNIT;
        // A binary suffix past the API server's cap would read back as the cap.
        if bytes != 0 && bytes.abs() <= BINARY_MAX_UNITS {
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
    use proptest::prelude::*;

    const GI: i128 = 1 << 30;
    const KI: i128 = 1 << 10;
    /// Resources whose canonical form differs (bytes, cores, counts).
    const RESOURCES: [&str; 5] = [
        "cpu",
        "memory",
        "pods",
        "ephemeral-storage",
        "hugepages-2Mi",
    ];

    fn units(n: i128) -> Option<Quantity> {
        Some(Quantity::from_nanos(n * NANOS_PER_UNIT))
    }

    #[test]
    fn how_many_fit() {
        let q = |s| parse(s).unwrap_or_default();
        assert_eq!(q("1").times(q("300m")), Some(3));
        assert_eq!(q("-1").times(q("300m")), Some(0));
        assert_eq!(q("1").times(q("0")), None);
    }

    #[test]
    fn parse_quantity_table() {
        let cases: Vec<(&str, Option<Quantity>)> = vec![
            ("100m", Some(Quantity::from_nanos(100_000_000))),
            ("1.5", Some(Quantity::from_nanos(1_500_000_000))),
            ("2", units(2)),
            ("3800m", Some(Quantity::from_nanos(3_800_000_000))),
            ("16Gi", units(16 * GI)),
            ("16383412Ki", units(16_383_412 * KI)),
            ("1e3", units(1000)),
            ("1E3", units(1000)),
            ("1e+3", units(1000)),
            ("15e-1", Some(Quantity::from_nanos(1_500_000_000))),
            ("500M", units(500_000_000)),
            ("0.5Gi", units(GI / 2)),
            ("1.5Ki", units(1536)),
            (".5", Some(Quantity::from_nanos(500_000_000))),
            ("5.", units(5)),
            ("+5", units(5)),
            ("007", units(7)),
            ("1.000000000000000000000000000000000000000000", units(1)),
            ("0", units(0)),
            ("0.0", units(0)),
            ("-0", units(0)),
            ("0e999999999999", units(0)),
            ("1n", Some(Quantity::from_nanos(1))),
            ("2u", Some(Quantity::from_nanos(2_000))),
            ("3k", units(3_000)),
            ("1T", units(1_000_000_000_000)),
            ("1P", units(1_000_000_000_000_000)),
            ("1E", units(1_000_000_000_000_000_000)),
            ("1Ei", units(1 << 60)),
            ("7Ei", units(7 << 60)),
            ("9Ei", units(i128::from(i64::MAX))),
            ("1Pi", units(1 << 50)),
            ("1Ti", units(1 << 40)),
            ("1Mi", units(1 << 20)),
            // Negative quantities are valid quantities.
            ("-1", units(-1)),
            ("-100m", Some(Quantity::from_nanos(-100_000_000))),
            ("-1.5Gi", units(-(3 * GI / 2))),
            // Below 1n rounds away from zero, as Kubernetes does.
            ("1e-10", Some(Quantity::from_nanos(1))),
            ("-1e-10", Some(Quantity::from_nanos(-1))),
            ("1.5n", Some(Quantity::from_nanos(2))),
            ("1e-999999999", Some(Quantity::from_nanos(1))),
            // Huge: more than i128 nano-units hold.
            ("1e40", None),
            ("1e29", units(100_000_000_000_000_000_000_000_000_000)),
            ("1e30", None),
            ("170141183460469231731687303715884105727", None),
            ("99999999999999999999999999999999999999999999", None),
            // Binary values are capped at 2^63 - 1 units, as the API server caps them.
            ("1000000000000Ei", units(i128::from(i64::MAX))),
            ("8Ei", units(i128::from(i64::MAX))),
            ("1e999999999999", None),
            // Garbage.
            ("", None),
            (" ", None),
            ("abc", None),
            // Kubernetes reads a number without digits as 0 on its fast path.
            (".", units(0)),
            ("+", units(0)),
            ("-", units(0)),
            ("--1", None),
            ("+-1", None),
            ("1.2.3", None),
            (" 1", None),
            ("1 ", None),
            ("1 Gi", None),
            ("K", None),
            ("1K", None),
            ("1KB", None),
            ("1Gii", None),
            ("1gi", None),
            ("1e", None),
            ("1e+", None),
            ("1e-", None),
            ("1e1.5", None),
            ("1ee3", None),
            ("e3", units(0)),
            ("Gi", units(0)),
            // … and refuses it on its arbitrary-precision path.
            ("Pi", None),
            ("+e-10", None),
            ("1,5", None),
            ("١", None),
            ("1µ", None),
            ("0x10", None),
            ("NaN", None),
            ("inf", None),
        ];
        let got: Vec<(&str, Option<Quantity>)> =
            cases.iter().map(|(s, _)| (*s, parse(s))).collect();
        assert_eq!(got, cases);
    }

    #[test]
    fn format_quantity_table() {
        let n = Quantity::from_nanos;
        let u = |x: i128| Quantity::from_nanos(x * NANOS_PER_UNIT);
        let cases = [
            ("cpu", u(4), "4"),
            ("cpu", n(3_800_000_000), "3800m"),
            ("cpu", n(100_000_000), "100m"),
            ("cpu", n(1_500), "1500n"),
            ("cpu", n(2_000), "2u"),
            ("cpu", u(0), "0"),
            ("cpu", n(-250_000_000), "-250m"),
            ("memory", u(32 * GI), "32Gi"),
            ("memory", u(GI / 2), "512Mi"),
            ("memory", u(2 * (1 << 40)), "2Ti"),
            ("memory", u(2048 * (1 << 40)), "2048Ti"),
            ("memory", u(32_766_824 * KI), "32766824Ki"),
            ("memory", u(1_000_000_000), "1000000000"),
            ("memory", u(2047), "2047"),
            ("memory", u(0), "0"),
            ("memory", u(-16 * GI), "-16Gi"),
            ("memory", n(500_000_000), "500m"),
            ("ephemeral-storage", u(100 * GI), "100Gi"),
            ("hugepages-2Mi", u(4 << 20), "4Mi"),
            ("pods", u(220), "220"),
            ("pods", n(1_500_000_000), "1500m"),
        ];
        let got: Vec<(&str, String)> = cases.iter().map(|(r, q, _)| (*r, format(r, *q))).collect();
        let want: Vec<(&str, String)> = cases.iter().map(|(r, _, s)| (*r, s.to_string())).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn sums_format_canonically() {
        let sum = |resource: &str, values: &[&str]| {
            let total = values
                .iter()
                .map(|v| parse(v).unwrap())
                .fold(Quantity::default(), |a, q| a.checked_add(q).unwrap());
            format(resource, total)
        };
        let got = [
            sum("cpu", &["100m", "1.5", "2", "3800m"]),
            sum("cpu", &["500m", "500m"]),
            sum("cpu", &["1e3", "1"]),
            sum("memory", &["16Gi", "0.5Gi"]),
            sum("memory", &["16383412Ki", "16383412Ki"]),
            sum("memory", &["500M", "500M"]),
            sum("memory", &["1Ki", "1023"]),
            sum("memory", &["512Mi", "512Mi", "1023Gi"]),
            sum("pods", &["110", "110", "58"]),
        ];
        assert_eq!(
            got,
            [
                "7400m",
                "1",
                "1001",
                "16896Mi",
                "32766824Ki",
                "1000000000",
                "2047",
                "1Ti",
                "278"
            ]
        );
    }

    #[test]
    fn checked_add_reports_overflow() {
        let max = Quantity::from_nanos(i128::MAX);
        assert_eq!(max.checked_add(Quantity::from_nanos(1)), None);
        assert_eq!(
            Quantity::from_nanos(1).checked_add(Quantity::from_nanos(2)),
            Some(Quantity::from_nanos(3))
        );
    }

    /// Quantity text built from the grammar: sign, digits, fraction, suffix or exponent.
    fn quantity_text() -> impl Strategy<Value = String> {
        let sign = prop::sample::select(vec!["", "", "+", "-"]);
        let suffix = prop_oneof![
            prop::sample::select(vec![
                "", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi",
                "Ei",
            ])
            .prop_map(str::to_string),
            (prop::sample::select(vec!["e", "E"]), -45_i32..45)
                .prop_map(|(e, x)| format!("{e}{x}")),
        ];
        (sign, "[0-9]{0,20}", prop::option::of("[0-9]{0,20}"), suffix).prop_map(
            |(sign, int, frac, suffix)| match frac {
                Some(frac) => format!("{sign}{int}.{frac}{suffix}"),
                None => format!("{sign}{int}{suffix}"),
            },
        )
    }

    fn round_trips(q: Quantity) -> Result<(), TestCaseError> {
        for resource in RESOURCES {
            let text = format(resource, q);
            prop_assert_eq!(parse(&text), Some(q), "{} as {}", resource, text);
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        #[test]
        fn parse_format_parse_round_trips(text in quantity_text()) {
            if let Some(q) = parse(&text) {
                round_trips(q)?;
            }
        }

        #[test]
        fn format_parse_round_trips_for_any_nanos(nanos in -i128::MAX..=i128::MAX) {
            round_trips(Quantity::from_nanos(nanos))?;
        }

        #[test]
        fn small_quantities_always_parse_exactly(
            negative in any::<bool>(),
            int in 0_u64..1_000_000_000_000,
            frac in "[0-9]{0,9}",
        ) {
            // `<int>.<frac>` is `<int><frac>` scaled down by 10^len(frac).
            let digits: i128 = format!("{int}{frac}").parse().unwrap();
            let frac_len = u32::try_from(frac.len()).unwrap();
            let magnitude = digits * 10_i128.pow(9 - frac_len);
            let want = Quantity::from_nanos(if negative { -magnitude } else { magnitude });
            let sign = if negative { "-" } else { "" };
            prop_assert_eq!(parse(&format!("{sign}{int}.{frac}")), Some(want));
            prop_assert_eq!(
                parse(&format!("{sign}{int}{frac}e-{}", frac.len())),
                Some(want)
            );
        }

        #[test]
        fn binary_suffixes_scale_exactly(n in 0_i64..1_000_000_000, power in 1_u32..=6) {
            let suffix = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][usize::try_from(power - 1).unwrap()];
            let bytes = (i128::from(n) * (1_i128 << (10 * power))).min(BINARY_MAX_UNITS);
            let want = bytes * NANOS_PER_UNIT;
            prop_assert_eq!(
                parse(&format!("{n}{suffix}")),
                Some(Quantity::from_nanos(want))
            );
        }

        #[test]
        fn arbitrary_strings_never_panic(text in any::<String>()) {
            if let Some(q) = parse(&text) {
                round_trips(q)?;
            }
        }

        #[test]
        fn quantity_alphabet_strings_never_panic(text in "[-+0-9.eEinumkKMGTP ]{0,40}") {
            if let Some(q) = parse(&text) {
                round_trips(q)?;
            }
        }
    }
}
