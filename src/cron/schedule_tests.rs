use super::*;
use jiff::civil::date;

fn parse(s: &str) -> Schedule {
    Schedule::parse(s).unwrap_or_else(|e| panic!("{s:?} should parse: {e}"))
}

fn bits(mask: u64) -> Vec<u32> {
    (0..64).filter(|b| mask & (1 << b) != 0).collect()
}

// A table (or a generator) reads best whole.
#[allow(clippy::too_many_lines)]
#[test]
fn field_syntax() {
    // (schedule, minutes, hours, days of month, months, days of week)
    #[allow(clippy::type_complexity)]
    let cases: &[(&str, &[u32], &[u32], &[u32], &[u32], &[u32])] = &[
        ("5 4 3 2 1", &[5], &[4], &[3], &[2], &[1]),
        (
            "1-3 22-23 30-31 11-12 5-6",
            &[1, 2, 3],
            &[22, 23],
            &[30, 31],
            &[11, 12],
            &[5, 6],
        ),
        (
            "*/20 */8 */10 */4 */3",
            &[0, 20, 40],
            &[0, 8, 16],
            &[1, 11, 21, 31],
            &[1, 5, 9],
            &[0, 3, 6],
        ),
        (
            "10-30/10 1-10/4 2-9/3 1-12/6 1-5/2",
            &[10, 20, 30],
            &[1, 5, 9],
            &[2, 5, 8],
            &[1, 7],
            &[1, 3, 5],
        ),
        (
            "50/5 20/2 28/2 10/1 4/2",
            &[50, 55],
            &[20, 22],
            &[28, 30],
            &[10, 11, 12],
            &[4, 6],
        ),
        (
            "0,15,45 1,2 1,15 1,6 0,3",
            &[0, 15, 45],
            &[1, 2],
            &[1, 15],
            &[1, 6],
            &[0, 3],
        ),
        (
            "0 0 1 jan,Mar,DEC mon-FRI",
            &[0],
            &[0],
            &[1],
            &[1, 3, 12],
            &[1, 2, 3, 4, 5],
        ),
        (
            "0 0 ? feb-apr/2 ?",
            &[0],
            &[0],
            &(1..=31).collect::<Vec<_>>(),
            &[2, 4],
            &[0, 1, 2, 3, 4, 5, 6],
        ),
        (
            "0 0 * * 7",
            &[0],
            &[0],
            &(1..=31).collect::<Vec<_>>(),
            &(1..=12).collect::<Vec<_>>(),
            &[0],
        ),
        (
            "0 0 * * 5-7",
            &[0],
            &[0],
            &(1..=31).collect::<Vec<_>>(),
            &(1..=12).collect::<Vec<_>>(),
            &[0, 5, 6],
        ),
        (
            "0 0 * * sun,SAT",
            &[0],
            &[0],
            &(1..=31).collect::<Vec<_>>(),
            &(1..=12).collect::<Vec<_>>(),
            &[0, 6],
        ),
        ("  59   23 31 12 6  ", &[59], &[23], &[31], &[12], &[6]),
    ];
    for &(s, mi, h, dom, mo, dow) in cases {
        let p = parse(s);
        assert_eq!(bits(p.minutes), mi, "minutes of {s:?}");
        assert_eq!(bits(u64::from(p.hours)), h, "hours of {s:?}");
        assert_eq!(
            bits(u64::from(p.days_of_month)),
            dom,
            "days of month of {s:?}"
        );
        assert_eq!(bits(u64::from(p.months)), mo, "months of {s:?}");
        assert_eq!(
            bits(u64::from(p.days_of_week)),
            dow,
            "days of week of {s:?}"
        );
    }
}

#[test]
fn macros_expand_like_robfig() {
    let cases = [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
        ("@DAILY", "0 0 * * *"),
    ];
    for (m, expanded) in cases {
        let a = parse(m);
        let b = parse(expanded);
        assert_eq!(
            (
                a.minutes,
                a.hours,
                a.days_of_month,
                a.months,
                a.days_of_week
            ),
            (
                b.minutes,
                b.hours,
                b.days_of_month,
                b.months,
                b.days_of_week
            ),
            "{m}"
        );
        assert_eq!((a.dom_star, a.dow_star), (b.dom_star, b.dow_star), "{m}");
        assert_eq!(a.as_str(), m);
    }
    assert!(parse("@hourly").minute_fixed());
    assert!(!parse("@hourly").hour_fixed());
    assert!(!parse("@hourly").is_fixed_time());
    for m in ["@daily", "@weekly", "@monthly", "@yearly"] {
        assert!(parse(m).is_fixed_time(), "{m}");
    }
}

#[test]
fn fixed_fields_follow_the_text() {
    let cases = [
        ("0 2 * * *", true, true),
        ("0-59 0-23 * * *", true, true),
        ("*/15 2 * * *", false, true),
        ("0 * * * *", true, false),
        ("30 */2 * * *", true, false),
        ("* * * * *", false, false),
        ("0,30 1,2 * * *", true, true),
    ];
    for (s, minute, hour) in cases {
        let p = parse(s);
        assert_eq!((p.minute_fixed(), p.hour_fixed()), (minute, hour), "{s}");
    }
}

#[test]
fn rejections_name_the_problem() {
    let cases = [
        ("", "schedule is empty"),
        ("   ", "schedule is empty"),
        (
            "@every 5m",
            "\"@every 5m\" is not supported; use a 5-field cron expression",
        ),
        ("@fortnightly", "unknown macro \"@fortnightly\""),
        (
            "TZ=UTC 0 0 * * *",
            "time zone prefix \"TZ=UTC\" is not allowed in the schedule; set timeZone instead",
        ),
        (
            "CRON_TZ=Europe/Madrid 0 0 * * *",
            "time zone prefix \"CRON_TZ=Europe/Madrid\"",
        ),
        (
            "0 0 0 * * *",
            "seconds fields are not supported: expected 5 fields, found 6",
        ),
        (
            "0 0 * *",
            "expected 5 fields (minute hour day-of-month month day-of-week), found 4",
        ),
        ("0 0 * * * * *", "found 7"),
        (
            "60 0 * * *",
            "invalid minute field \"60\": 60 is outside 0-59",
        ),
        (
            "0 24 * * *",
            "invalid hour field \"24\": 24 is outside 0-23",
        ),
        (
            "0 0 0 * *",
            "invalid day-of-month field \"0\": 0 is outside 1-31",
        ),
        ("0 0 32 * *", "invalid day-of-month field \"32\""),
        (
            "0 0 * 13 *",
            "invalid month field \"13\": 13 is outside 1-12",
        ),
        ("0 0 * 0 *", "invalid month field \"0\""),
        (
            "0 0 * * 8",
            "invalid day-of-week field \"8\": 8 is outside 0-7",
        ),
        (
            "0 0 * * MONDAY",
            "invalid day-of-week field \"MONDAY\": \"MONDAY\" is not a number or name",
        ),
        ("0 0 * JANUARY *", "invalid month field \"JANUARY\""),
        (
            "0 0 * * mon-jan",
            "invalid day-of-week field \"mon-jan\": \"jan\" is not a number or name",
        ),
        (
            "5-1 * * * *",
            "invalid minute field \"5-1\": range start 5 is after its end 1",
        ),
        (
            "*/0 * * * *",
            "invalid minute field \"*/0\": step must be at least 1",
        ),
        (
            "*/x * * * *",
            "invalid minute field \"*/x\": step \"x\" is not a number",
        ),
        (
            "1,,2 * * * *",
            "invalid minute field \"\": empty list element",
        ),
        ("0 -1 * * *", "invalid hour field \"-1\""),
        ("0 0 L * *", "invalid day-of-month field \"L\""),
        ("0 0 * * 1#2", "invalid day-of-week field \"1#2\""),
    ];
    for (s, want) in cases {
        match Schedule::parse(s) {
            Ok(p) => panic!("{s:?} should be rejected, parsed as {p:?}"),
            Err(e) => {
                let msg = e.to_string();
                assert!(
                    msg.starts_with(want) || msg.contains(want),
                    "{s:?}: got {msg:?}, want {want:?}"
                );
            }
        }
    }
}

#[test]
fn day_rule_is_either_when_both_restricted() {
    // 2026-11-30 is a Monday; the 1st of December is a Tuesday.
    let both = parse("0 0 1 * 1");
    assert!(
        both.matches(date(2026, 11, 30).at(0, 0, 0, 0)),
        "Monday matches by weekday"
    );
    assert!(
        both.matches(date(2026, 12, 1).at(0, 0, 0, 0)),
        "the 1st matches by day"
    );
    assert!(!both.matches(date(2026, 12, 2).at(0, 0, 0, 0)));

    let dom_only = parse("0 0 1 * *");
    assert!(!dom_only.matches(date(2026, 11, 30).at(0, 0, 0, 0)));
    let dow_star = parse("0 0 1 * *");
    assert!(dow_star.matches(date(2026, 12, 1).at(0, 0, 0, 0)));

    let dom_star = parse("0 0 * * 1");
    assert!(dom_star.matches(date(2026, 11, 30).at(0, 0, 0, 0)));
    assert!(!dom_star.matches(date(2026, 12, 1).at(0, 0, 0, 0)));

    // `?` is a star, so the weekday must also match.
    let question = parse("0 0 ? * 2");
    assert!(question.matches(date(2026, 12, 1).at(0, 0, 0, 0)));
    assert!(!question.matches(date(2026, 11, 30).at(0, 0, 0, 0)));

    // robfig (and therefore CronJob) treats `*/n` with n > 1 as restricted: either rule.
    let stepped = parse("0 0 */2 * 1");
    assert!(
        stepped.matches(date(2026, 11, 30).at(0, 0, 0, 0)),
        "Monday the 30th"
    );
    assert!(
        stepped.matches(date(2026, 12, 3).at(0, 0, 0, 0)),
        "odd day, Thursday"
    );
    assert!(!stepped.matches(date(2026, 12, 2).at(0, 0, 0, 0)));

    // 7 and 0 are both Sunday: 2026-12-06 is a Sunday.
    assert!(parse("0 0 * * 7").matches(date(2026, 12, 6).at(0, 0, 0, 0)));
    assert!(parse("0 0 * * 0").matches(date(2026, 12, 6).at(0, 0, 0, 0)));
    assert!(!parse("0 0 * * 7").matches(date(2026, 12, 5).at(0, 0, 0, 0)));
}

#[test]
fn matches_needs_a_whole_minute() {
    let every = parse("* * * * *");
    assert!(every.matches(date(2026, 1, 1).at(12, 34, 0, 0)));
    assert!(!every.matches(date(2026, 1, 1).at(12, 34, 1, 0)));
    assert!(!every.matches(date(2026, 1, 1).at(12, 34, 0, 1)));
}

#[test]
fn next_after_walks_fields() {
    let cases = [
        (
            "0 8 * * 1-5",
            date(2026, 11, 27).at(8, 0, 0, 0),
            date(2026, 11, 30).at(8, 0, 0, 0),
        ),
        (
            "0 8 * * 1-5",
            date(2026, 11, 30).at(7, 59, 59, 0),
            date(2026, 11, 30).at(8, 0, 0, 0),
        ),
        (
            "*/15 * * * *",
            date(2026, 12, 31).at(23, 59, 0, 0),
            date(2027, 1, 1).at(0, 0, 0, 0),
        ),
        (
            "*/15 * * * *",
            date(2026, 1, 1).at(0, 0, 0, 1),
            date(2026, 1, 1).at(0, 15, 0, 0),
        ),
        (
            "0 0 29 2 *",
            date(2026, 1, 1).at(0, 0, 0, 0),
            date(2028, 2, 29).at(0, 0, 0, 0),
        ),
        (
            "0 0 29 2 *",
            date(2096, 3, 1).at(0, 0, 0, 0),
            date(2104, 2, 29).at(0, 0, 0, 0),
        ),
        (
            "0 0 31 * *",
            date(2026, 4, 1).at(0, 0, 0, 0),
            date(2026, 5, 31).at(0, 0, 0, 0),
        ),
        (
            "30 23 * dec sat",
            date(2026, 1, 1).at(0, 0, 0, 0),
            date(2026, 12, 5).at(23, 30, 0, 0),
        ),
        (
            "@yearly",
            date(2026, 1, 1).at(0, 0, 0, 0),
            date(2027, 1, 1).at(0, 0, 0, 0),
        ),
        (
            "59 23 31 12 *",
            date(2026, 12, 31).at(23, 59, 0, 0),
            date(2027, 12, 31).at(23, 59, 0, 0),
        ),
    ];
    for (s, after, want) in cases {
        assert_eq!(parse(s).next_after(after), Some(want), "{s} after {after}");
    }
}

#[test]
fn impossible_dates_give_up() {
    for s in ["0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 31 2 *"] {
        assert_eq!(
            parse(s).next_after(date(2026, 1, 1).at(0, 0, 0, 0)),
            None,
            "{s}"
        );
    }
    // Near the end of jiff's range the search stops instead of overflowing.
    assert_eq!(
        parse("0 0 1 1 *").next_after(date(9999, 6, 1).at(0, 0, 0, 0)),
        None
    );
}

#[test]
fn display_and_from_str_round_trip() {
    let p: Schedule = " 0 8 * * 1-5 ".parse().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.to_string(), "0 8 * * 1-5");
}
