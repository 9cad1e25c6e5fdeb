//! Cron schedules as CronJobs spell them: five fields (minute, hour, day of month, month, day
//! of week) with lists, ranges, steps and names, the `@hourly`-style macros, and an optional
//! `CRON_TZ=`/`TZ=` prefix; evaluated in a time zone (robfig/cron's semantics: when both day
//! fields are restricted, either may match).

use jiff::civil::{Date, DateTime, Time};
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

/// A parsed schedule.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Schedule {
    /// Allowed minutes (bit i = minute i).
    minutes: u64,
    /// Allowed hours.
    hours: u64,
    /// Allowed days of month (1-31).
    dom: u64,
    /// Allowed months (1-12).
    months: u64,
    /// Allowed days of week (0-6, Sunday 0).
    dow: u64,
    /// Whether the day-of-month field was `*`/`?`.
    dom_star: bool,
    /// Whether the day-of-week field was `*`/`?`.
    dow_star: bool,
    /// Time zone from a `CRON_TZ=`/`TZ=` prefix.
    pub(crate) tz: Option<String>,
}

/// Parses one field into a bit set within `min..=max`.
fn field(s: &str, min: u32, max: u32, names: &[&str]) -> Result<(u64, bool), String> {
    let mut bits = 0u64;
    let mut star = false;
    let value = |v: &str| -> Result<u32, String> {
        if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(v)) {
            return Ok(u32::try_from(i).unwrap_or(0) + min);
        }
        v.parse::<u32>()
            .map_err(|_| format!("failed to parse int from {v}"))
    };
    for part in s.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, st)) => (
                r,
                st.parse::<u32>()
                    .map_err(|_| format!("failed to parse int from {st}"))?,
            ),
            None => (part, 1),
        };
        if step == 0 {
            return Err(format!("step of range should be a positive number: {part}"));
        }
        let (lo, hi) = if range == "*" || range == "?" {
            if part.split_once('/').is_none() {
                star = true;
            }
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a)?, value(b)?)
        } else {
            let v = value(range)?;
            (v, if part.contains('/') { max } else { v })
        };
        if lo < min || hi > max || lo > hi {
            return Err(format!("end of range ({hi}) above maximum ({max}): {part}"));
        }
        let mut v = lo;
        while v <= hi {
            bits |= 1 << v;
            v += step;
        }
    }
    Ok((bits, star))
}

impl Schedule {
    /// Parses a schedule string.
    pub(crate) fn parse(spec: &str) -> Result<Schedule, String> {
        let mut s = spec.trim();
        let mut tz = None;
        for prefix in ["CRON_TZ=", "TZ="] {
            if let Some(rest) = s.strip_prefix(prefix) {
                let (zone, tail) = rest
                    .split_once(char::is_whitespace)
                    .ok_or_else(|| format!("missing schedule after time zone: {spec}"))?;
                tz = Some(zone.to_owned());
                s = tail.trim();
            }
        }
        let expanded = match s {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other => other,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(format!(
                "expected exactly 5 fields, found {}: {spec}",
                fields.len()
            ));
        }
        const MONTHS: &[&str] = &[
            "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
        ];
        const DAYS: &[&str] = &["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
        let (minutes, _) = field(fields[0], 0, 59, &[])?;
        let (hours, _) = field(fields[1], 0, 23, &[])?;
        let (dom, dom_star) = field(fields[2], 1, 31, &[])?;
        let (months, _) = field(fields[3], 1, 12, MONTHS)?;
        let (mut dow, dow_star) = field(fields[4], 0, 7, DAYS)?;
        if dow & (1 << 7) != 0 {
            dow = (dow & !(1 << 7)) | 1;
        }
        Ok(Schedule {
            minutes,
            hours,
            dom,
            months,
            dow,
            dom_star,
            dow_star,
            tz,
        })
    }

    /// Whether the schedule allows `date`.
    fn day_matches(&self, date: Date) -> bool {
        let dom = self.dom & (1 << date.day()) != 0;
        let dow = self.dow & (1 << date.weekday().to_sunday_zero_offset()) != 0;
        let month = self.months & (1 << date.month()) != 0;
        month
            && if self.dom_star || self.dow_star {
                dom && dow
            } else {
                dom || dow
            }
    }

    /// The first activation strictly after `after`, in `tz` (None within five years: never).
    pub(crate) fn next(&self, after: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        let local = tz.to_datetime(after);
        let mut date = local.date();
        let start_minute = (i32::from(local.hour()) * 60 + i32::from(local.minute())) + 1;
        for day in 0..(366 * 5) {
            if self.day_matches(date) {
                let first = if day == 0 { start_minute } else { 0 };
                for m in first..(24 * 60) {
                    let (h, mi) = (m / 60, m % 60);
                    if self.hours & (1 << h) == 0 || self.minutes & (1 << mi) == 0 {
                        continue;
                    }
                    let t = Time::new(
                        i8::try_from(h).unwrap_or(0),
                        i8::try_from(mi).unwrap_or(0),
                        0,
                        0,
                    )
                    .ok()?;
                    let ts = tz
                        .to_ambiguous_zoned(DateTime::from_parts(date, t))
                        .compatible()
                        .ok()?
                        .timestamp();
                    if ts > after {
                        return Some(ts);
                    }
                }
            }
            date = date.checked_add(1.day()).ok()?;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap_or(Timestamp::UNIX_EPOCH)
    }

    #[test]
    fn every_minute_and_steps() {
        let s = Schedule::parse("*/1 * * * *").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            s.next(ts("2024-05-06T07:08:09Z"), &TimeZone::UTC),
            Some(ts("2024-05-06T07:09:00Z"))
        );
        let s = Schedule::parse("*/15 9-17 * * MON-FRI").unwrap_or_else(|e| panic!("{e}"));
        // Saturday → Monday 09:00.
        assert_eq!(
            s.next(ts("2024-05-04T12:00:00Z"), &TimeZone::UTC),
            Some(ts("2024-05-06T09:00:00Z"))
        );
    }

    #[test]
    fn macros_time_zones_and_day_fields() {
        let s = Schedule::parse("CRON_TZ=Europe/Paris @daily").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.tz.as_deref(), Some("Europe/Paris"));
        if let Ok(paris) = TimeZone::get("Europe/Paris") {
            // Midnight in Paris in summer is 22:00 UTC.
            assert_eq!(
                s.next(ts("2024-07-01T12:00:00Z"), &paris),
                Some(ts("2024-07-01T22:00:00Z"))
            );
        }
        // Both day fields restricted: either matches (the 13th, or a Friday).
        let s = Schedule::parse("0 0 13 * 5").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            s.next(ts("2024-05-06T00:00:00Z"), &TimeZone::UTC),
            Some(ts("2024-05-10T00:00:00Z"))
        );
        assert!(Schedule::parse("* * *").is_err());
        assert!(Schedule::parse("61 * * * *").is_err());
    }
}
