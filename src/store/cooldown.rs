//! Cooldowns: a backend whose quota is used up (or that is rate limited with a known delay)
//! is marked until its reset time, so every coder sharing the store fails fast on it
//! instead of starting the CLI only to hear the same 429 (DESIGN §10, §12).
//!
//! Times are wall-clock Unix milliseconds of the machine that wrote them, plus the reset
//! time as the classifier gave it (RFC 3339 UTC) for messages; fleets are assumed to keep
//! their clocks in sync (NTP), as quota reset times are wall-clock times anyway.

use super::sql::{Col, Val};
use super::{Store, StoreError};

/// One backend's cooldown.
#[derive(Debug, Clone, PartialEq)]
pub struct Cooldown {
    pub backend: String,
    /// Until when, in Unix milliseconds.
    pub until_ms: i64,
    /// The same time, RFC 3339 UTC (`2026-11-24T03:00:00Z`).
    pub retry_at: String,
    /// The provider error class that caused it (`quota_exhausted`, `rate_limited`).
    pub class: String,
    pub provider: String,
    pub code: Option<String>,
    pub http_status: Option<u16>,
    /// The failure's one-line summary.
    pub message: String,
    /// The run that hit the limit.
    pub set_by: String,
}

impl Store {
    /// Puts a backend in cooldown; a cooldown already recorded that lasts longer stays.
    pub fn set_cooldown(&self, cooldown: &Cooldown) -> Result<(), StoreError> {
        let c = cooldown.clone();
        self.call(move |conn| {
            conn.exec(
                "INSERT INTO cooldowns (backend, until_ms, retry_at, class, provider, code,
                   http_status, message, set_by, set_at_ms)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
                 ON CONFLICT (backend) DO UPDATE SET until_ms = excluded.until_ms,
                   retry_at = excluded.retry_at, class = excluded.class,
                   provider = excluded.provider, code = excluded.code,
                   http_status = excluded.http_status, message = excluded.message,
                   set_by = excluded.set_by, set_at_ms = excluded.set_at_ms
                 WHERE cooldowns.until_ms < excluded.until_ms",
                &[
                    c.backend.into(),
                    c.until_ms.into(),
                    c.retry_at.into(),
                    c.class.into(),
                    c.provider.into(),
                    c.code.into(),
                    c.http_status.map(i64::from).into(),
                    c.message.into(),
                    c.set_by.into(),
                    now_ms().into(),
                ],
            )
            .map(|_| ())
        })
    }

    /// The backend's cooldown if it is still running.
    pub fn cooldown(&self, backend: &str) -> Result<Option<Cooldown>, StoreError> {
        let backend = backend.to_owned();
        let now = now_ms();
        self.call(move |conn| {
            let rows = conn.query(
                "SELECT backend, until_ms, retry_at, class, provider, code, http_status,
                   message, set_by
                 FROM cooldowns WHERE backend = $1 AND until_ms > $2",
                &[backend.into(), now.into()],
                &[
                    Col::Text,
                    Col::Int,
                    Col::Text,
                    Col::Text,
                    Col::Text,
                    Col::Text,
                    Col::Int,
                    Col::Text,
                    Col::Text,
                ],
            )?;
            Ok(rows.into_iter().next().map(|r| row_to_cooldown(&r)))
        })
    }

    /// Whether runs on `backend` would fail fast now (the router skips such backends).
    pub fn is_cooling(&self, backend: &str) -> Result<bool, StoreError> {
        Ok(self.cooldown(backend)?.is_some())
    }

    /// Ends a backend's cooldown (all backends' when `None`); returns how many ended.
    pub fn clear_cooldown(&self, backend: Option<&str>) -> Result<u64, StoreError> {
        let backend = backend.map(str::to_owned);
        self.call(move |conn| match backend {
            Some(b) => conn.exec("DELETE FROM cooldowns WHERE backend = $1", &[b.into()]),
            None => conn.exec("DELETE FROM cooldowns", &[]),
        })
    }
}

fn row_to_cooldown(r: &[Val]) -> Cooldown {
    let text = |i: usize| r[i].text().unwrap_or_default().to_owned();
    Cooldown {
        backend: text(0),
        until_ms: r[1].int().unwrap_or(0),
        retry_at: text(2),
        class: text(3),
        provider: text(4),
        code: r[5].text().map(str::to_owned),
        http_status: r[6].int().and_then(|s| u16::try_from(s).ok()),
        message: text(7),
        set_by: text(8),
    }
}

/// Now, in Unix milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// `2026-11-24T03:00:00Z` (the classifier's form; fractional seconds allowed) → Unix ms.
pub fn parse_utc(text: &str) -> Option<i64> {
    let text = text.trim().strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.split(':');
    let h: i64 = t.next()?.parse().ok()?;
    let min: i64 = t.next()?.parse().ok()?;
    let sec: f64 = t.next().unwrap_or("0").parse().ok()?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || h > 23 || min > 59 || sec >= 61.0 {
        return None;
    }
    let days = days_from_civil(y, m, day);
    Some((days * 86_400 + h * 3600 + min * 60) * 1000 + (sec * 1000.0) as i64)
}

/// Unix ms → `2026-11-24T03:00:00Z`.
pub fn format_utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Location;

    #[test]
    fn utc_times_round_trip() {
        assert_eq!(parse_utc("1970-01-01T00:00:00Z"), Some(0));
        let ms = parse_utc("2024-02-29T17:00:00Z").unwrap();
        assert_eq!(format_utc(ms), "2024-02-29T17:00:00Z");
        assert_eq!(
            format_utc(parse_utc("2026-11-24T03:00:00Z").unwrap()),
            "2026-11-24T03:00:00Z"
        );
        assert_eq!(parse_utc("2026-13-01T00:00:00Z"), None);
        assert_eq!(parse_utc("tomorrow"), None);
    }

    fn cooldown(backend: &str, until_ms: i64) -> Cooldown {
        Cooldown {
            backend: backend.into(),
            until_ms,
            retry_at: format_utc(until_ms),
            class: "quota_exhausted".into(),
            provider: "zai".into(),
            code: Some("1308".into()),
            http_status: Some(429),
            message: "Usage limit reached".into(),
            set_by: "run-1".into(),
        }
    }

    #[test]
    fn cooldowns_run_out_and_the_longer_one_wins() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&Location::Sqlite(dir.path().join("s.db"))).unwrap();
        let now = now_ms();
        store.set_cooldown(&cooldown("glm", now - 1)).unwrap();
        assert!(
            !store.is_cooling("glm").unwrap(),
            "a past reset time cools nothing"
        );
        store.set_cooldown(&cooldown("glm", now + 60_000)).unwrap();
        store.set_cooldown(&cooldown("glm", now + 1_000)).unwrap();
        let c = store.cooldown("glm").unwrap().unwrap();
        assert_eq!(c.until_ms, now + 60_000);
        assert_eq!(c.http_status, Some(429));
        assert!(!store.is_cooling("deepseek").unwrap());
        assert_eq!(store.clear_cooldown(Some("glm")).unwrap(), 1);
        assert!(!store.is_cooling("glm").unwrap());
    }
}
