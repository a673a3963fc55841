//! Concurrency slots: at most `max_concurrent` runs on one backend at once, across every
//! coder sharing the store (DESIGN §10). A slot is a lease row `(backend, slot number)` with
//! an expiry; the holder renews it from a heartbeat thread while the run lives and deletes
//! it at the end. A coder that dies without cleaning up (SIGKILL, power loss) stops renewing,
//! so its lease expires and the slot is taken over: no slot is held forever.
//!
//! Taking a slot is one serialised transaction (delete the backend's expired leases, pick
//! the lowest free number below the limit, insert it), so two coders cannot both count a
//! free slot and both take it.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use super::sql::{Col, Val};
use super::{Store, StoreError, now_ms};

/// How long a lease lasts without renewal, unless `CODER_SLOT_LEASE_S` says otherwise.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// The lease length in force (`CODER_SLOT_LEASE_S`, seconds, at least 1).
pub fn lease_length() -> Duration {
    std::env::var("CODER_SLOT_LEASE_S")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 1.0)
        .map_or(DEFAULT_LEASE, Duration::from_secs_f64)
}

/// Who holds a slot, for the queued run's message.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotHolder {
    pub slot: i64,
    pub holder: String,
    pub host: String,
    pub pid: i64,
    pub expires_ms: i64,
}

impl Store {
    /// Takes a free slot of `backend` for `holder` if fewer than `max` live leases exist;
    /// its number, or `None` when all are taken.
    pub fn try_acquire_slot(
        &self,
        backend: &str,
        max: u32,
        holder: &str,
        lease: Duration,
    ) -> Result<Option<i64>, StoreError> {
        let (backend, holder) = (backend.to_owned(), holder.to_owned());
        let host = hostname();
        let pid = i64::from(std::process::id());
        self.call(move |conn| {
            conn.serialized(|conn| {
                let now = now_ms();
                conn.exec(
                    "DELETE FROM slots WHERE backend = $1 AND expires_ms <= $2",
                    &[backend.clone().into(), now.into()],
                )?;
                let taken: Vec<i64> = conn
                    .query(
                        "SELECT slot FROM slots WHERE backend = $1",
                        &[backend.clone().into()],
                        &[Col::Int],
                    )?
                    .iter()
                    .filter_map(|r| r[0].int())
                    .collect();
                let Some(free) = (0..i64::from(max)).find(|n| !taken.contains(n)) else {
                    return Ok(None);
                };
                let params: Vec<Val> = vec![
                    backend.into(),
                    free.into(),
                    holder.into(),
                    host.into(),
                    pid.into(),
                    now.into(),
                    (now + lease.as_millis() as i64).into(),
                ];
                conn.exec(
                    "INSERT INTO slots (backend, slot, holder, host, pid, acquired_ms, expires_ms)
                     VALUES ($1, $2, $3, $4, $5, $6, $7)",
                    &params,
                )?;
                Ok(Some(free))
            })
        })
    }

    /// Extends a lease; `false` when it is gone (it expired and another run took it).
    pub fn renew_slot(
        &self,
        backend: &str,
        slot: i64,
        holder: &str,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        let params: Vec<Val> = vec![
            backend.into(),
            slot.into(),
            holder.into(),
            (now_ms() + lease.as_millis() as i64).into(),
        ];
        self.call(move |conn| {
            conn.exec(
                "UPDATE slots SET expires_ms = $4
                 WHERE backend = $1 AND slot = $2 AND holder = $3",
                &params,
            )
            .map(|n| n > 0)
        })
    }

    /// Gives a slot back (only if `holder` still holds it).
    pub fn release_slot(&self, backend: &str, slot: i64, holder: &str) -> Result<(), StoreError> {
        let params: Vec<Val> = vec![backend.into(), slot.into(), holder.into()];
        self.call(move |conn| {
            conn.exec(
                "DELETE FROM slots WHERE backend = $1 AND slot = $2 AND holder = $3",
                &params,
            )
            .map(|_| ())
        })
    }

    /// The live leases of a backend.
    pub fn slot_holders(&self, backend: &str) -> Result<Vec<SlotHolder>, StoreError> {
        let params: Vec<Val> = vec![backend.into(), now_ms().into()];
        let rows = self.call(move |conn| {
            conn.query(
                "SELECT slot, holder, host, pid, expires_ms FROM slots
                 WHERE backend = $1 AND expires_ms > $2 ORDER BY slot",
                &params,
                &[Col::Int, Col::Text, Col::Text, Col::Int, Col::Int],
            )
        })?;
        Ok(rows
            .iter()
            .map(|r| SlotHolder {
                slot: r[0].int().unwrap_or(0),
                holder: r[1].text().unwrap_or_default().to_owned(),
                host: r[2].text().unwrap_or_default().to_owned(),
                pid: r[3].int().unwrap_or(0),
                expires_ms: r[4].int().unwrap_or(0),
            })
            .collect())
    }
}

/// A held slot: renewed by a heartbeat thread until dropped, then released.
pub struct SlotGuard {
    store: Arc<Store>,
    backend: String,
    slot: i64,
    holder: String,
    stop: Option<mpsc::Sender<()>>,
    heartbeat: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for SlotGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SlotGuard({} #{})", self.backend, self.slot)
    }
}

impl SlotGuard {
    /// Tries once to take a slot; the guard holds it (and renews it) until dropped.
    pub fn try_acquire(
        store: &Arc<Store>,
        backend: &str,
        max: u32,
        holder: &str,
    ) -> Result<Option<SlotGuard>, StoreError> {
        let lease = lease_length();
        let Some(slot) = store.try_acquire_slot(backend, max, holder, lease)? else {
            return Ok(None);
        };
        let (stop, stopped) = mpsc::channel::<()>();
        let beat = {
            let (store, backend, holder) = (store.clone(), backend.to_owned(), holder.to_owned());
            std::thread::Builder::new()
                .name("coder-slot-heartbeat".to_owned())
                .spawn(move || {
                    // Renew three times per lease, so one slow renewal does not lose it.
                    while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(lease / 3)
                    {
                        let _ = store.renew_slot(&backend, slot, &holder, lease);
                    }
                })
                .ok()
        };
        Ok(Some(SlotGuard {
            store: store.clone(),
            backend: backend.to_owned(),
            slot,
            holder: holder.to_owned(),
            stop: Some(stop),
            heartbeat: beat,
        }))
    }

    pub fn slot(&self) -> i64 {
        self.slot
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(beat) = self.heartbeat.take() {
            let _ = beat.join();
        }
        let _ = self
            .store
            .release_slot(&self.backend, self.slot, &self.holder);
    }
}

/// This machine's name, for the holder's record.
fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Location;

    #[test]
    fn a_limit_of_one_admits_one_until_released_or_expired() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&Location::Sqlite(dir.path().join("s.db"))).unwrap());
        let a = SlotGuard::try_acquire(&store, "glm", 1, "run-a")
            .unwrap()
            .unwrap();
        assert!(
            SlotGuard::try_acquire(&store, "glm", 1, "run-b")
                .unwrap()
                .is_none()
        );
        assert!(
            SlotGuard::try_acquire(&store, "deepseek", 1, "run-b")
                .unwrap()
                .is_some(),
            "other backends have their own slots"
        );
        assert_eq!(store.slot_holders("glm").unwrap()[0].holder, "run-a");
        drop(a);
        let b = SlotGuard::try_acquire(&store, "glm", 1, "run-b").unwrap();
        assert!(b.is_some());
        drop(b);
        // A lease nobody renews (a killed coder) expires and its slot is taken over.
        let short = Duration::from_millis(1);
        assert_eq!(
            store.try_acquire_slot("glm", 1, "dead", short).unwrap(),
            Some(0)
        );
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(
            store
                .try_acquire_slot("glm", 1, "alive", DEFAULT_LEASE)
                .unwrap(),
            Some(0)
        );
        assert!(!store.renew_slot("glm", 0, "dead", DEFAULT_LEASE).unwrap());
    }
}
