//! A fixed or current UTC timestamp and the `strftime` subset chat templates use (`strftime_now`).

use std::time::{SystemTime, UNIX_EPOCH};

/// A civil date and time (no time zone: templates only print it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timestamp {
    /// Year, e.g. 2025.
    pub year: i32,
    /// Month 1..=12.
    pub month: u32,
    /// Day of month 1..=31.
    pub day: u32,
    /// Hour 0..=23.
    pub hour: u32,
    /// Minute 0..=59.
    pub minute: u32,
    /// Second 0..=59.
    pub second: u32,
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i32, m: u32, d: u32) -> i64 {
    let y = i64::from(y) - i64::from(m <= 2);
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (i64::from(m) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn is_leap(y: i32) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

impl Timestamp {
    /// The current time in UTC (transformers uses local time; servers usually run in UTC).
    pub fn now_utc() -> Timestamp {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let secs = i64::try_from(secs).unwrap_or(0);
        Self::from_unix(secs)
    }

    /// The UTC civil time of a Unix timestamp in seconds.
    pub fn from_unix(secs: i64) -> Timestamp {
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let d = doy - (153 * mp + 2) / 5 + 1;
        let m = if mp < 10 { mp + 3 } else { mp - 9 };
        let y = yoe + era * 400 + i64::from(m <= 2);
        Timestamp {
            year: i32::try_from(y).unwrap_or(1970),
            month: u32::try_from(m).unwrap_or(1),
            day: u32::try_from(d).unwrap_or(1),
            hour: u32::try_from(rem / 3600).unwrap_or(0),
            minute: u32::try_from(rem % 3600 / 60).unwrap_or(0),
            second: u32::try_from(rem % 60).unwrap_or(0),
        }
    }

    fn weekday(&self) -> usize {
        // 1970-01-01 was a Thursday (index 3 with Monday = 0).
        usize::try_from((days_from_civil(self.year, self.month, self.day) + 3).rem_euclid(7))
            .unwrap_or(0)
    }

    fn day_of_year(&self) -> i64 {
        days_from_civil(self.year, self.month, self.day) - days_from_civil(self.year, 1, 1) + 1
    }

    /// Format like C/Python `strftime` for `%Y %y %m %d %e %H %I %M %S %p %b %B %h %a %A %j %u %w %F %T %D
    /// %R %n %t %%`, with glibc's `%-X` (no padding). Other directives are copied as written.
    pub fn strftime(&self, fmt: &str) -> String {
        let mut out = String::new();
        let mut chars = fmt.chars().peekable();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            let no_pad = chars.peek() == Some(&'-');
            if no_pad {
                chars.next();
            }
            let Some(d) = chars.next() else {
                out.push('%');
                break;
            };
            let num = |n: i64, width: usize| -> String {
                if no_pad {
                    n.to_string()
                } else {
                    format!("{n:0width$}")
                }
            };
            let month_name = MONTHS
                .get(self.month.saturating_sub(1) as usize)
                .copied()
                .unwrap_or("?");
            let day_name = DAYS.get(self.weekday()).copied().unwrap_or("?");
            let h12 = match self.hour % 12 {
                0 => 12,
                h => h,
            };
            let piece = match d {
                'Y' => self.year.to_string(),
                'y' => num(i64::from(self.year.rem_euclid(100)), 2),
                'm' => num(i64::from(self.month), 2),
                'd' => num(i64::from(self.day), 2),
                'e' => format!("{:>2}", self.day),
                'H' => num(i64::from(self.hour), 2),
                'I' => num(i64::from(h12), 2),
                'M' => num(i64::from(self.minute), 2),
                'S' => num(i64::from(self.second), 2),
                'p' => if self.hour < 12 { "AM" } else { "PM" }.to_owned(),
                'B' => month_name.to_owned(),
                'b' | 'h' => month_name.chars().take(3).collect(),
                'A' => day_name.to_owned(),
                'a' => day_name.chars().take(3).collect(),
                'j' => num(self.day_of_year(), 3),
                'u' => (self.weekday() + 1).to_string(),
                'w' => ((self.weekday() + 1) % 7).to_string(),
                'F' => format!("{}-{:02}-{:02}", self.year, self.month, self.day),
                'T' => format!("{:02}:{:02}:{:02}", self.hour, self.minute, self.second),
                'R' => format!("{:02}:{:02}", self.hour, self.minute),
                'D' => format!(
                    "{:02}/{:02}/{:02}",
                    self.month,
                    self.day,
                    self.year.rem_euclid(100)
                ),
                'n' => "\n".to_owned(),
                't' => "\t".to_owned(),
                '%' => "%".to_owned(),
                other => {
                    if no_pad {
                        format!("%-{other}")
                    } else {
                        format!("%{other}")
                    }
                }
            };
            out.push_str(&piece);
        }
        out
    }

    /// Whether the fields form a real date and time.
    pub fn is_valid(&self) -> bool {
        let days_in_month = match self.month {
            1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
            4 | 6 | 9 | 11 => 30,
            2 if is_leap(self.year) => 29,
            2 => 28,
            _ => return false,
        };
        (1..=days_in_month).contains(&self.day)
            && self.hour < 24
            && self.minute < 60
            && self.second < 60
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_round_trip() {
        let t = Timestamp::from_unix(1_741_338_303); // 2025-03-07 09:05:03 UTC
        assert_eq!(
            t,
            Timestamp {
                year: 2025,
                month: 3,
                day: 7,
                hour: 9,
                minute: 5,
                second: 3
            }
        );
        assert!(t.is_valid());
    }

    #[test]
    fn formats() {
        let t = Timestamp {
            year: 2025,
            month: 3,
            day: 7,
            hour: 9,
            minute: 5,
            second: 3,
        };
        assert_eq!(t.strftime("%d %b %Y"), "07 Mar 2025");
        assert_eq!(t.strftime("%B %d, %Y"), "March 07, 2025");
        assert_eq!(
            t.strftime("%A %-d %H:%M:%S %j %%"),
            "Friday 7 09:05:03 066 %"
        );
    }
}
