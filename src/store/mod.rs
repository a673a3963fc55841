//! The store (DESIGN §10): where the state shared by many coder runs lives — concurrency
//! slots, backend cooldowns, the routing ledger and the per-backend request shape. SQLite by
//! default (`<state>/coder.db`, WAL, a busy timeout, so many processes of one machine share
//! it), PostgreSQL (`--store postgres://…`) so that a fleet of machines shares it.
//!
//! Boundaries: this module knows SQL and leases, not runs. The run pipeline decides when to
//! take a slot or record a cooldown (`crate::pipeline::admission`); the routing policy only
//! sees the [`crate::routing::ledger::Ledger`] trait, which [`Store`] implements.
//!
//! Why a worker thread: both drivers are synchronous, and the `postgres` crate drives its
//! connection with a private tokio runtime that must never be entered from inside coder's
//! own runtime. So each open store owns one plain thread that holds the connection and runs
//! the statements it is sent; callers block on the answer (statements take milliseconds).
//! Opening is explicit and lazy: a run that needs no slot and finds no store pays nothing.

mod cooldown;
mod ledger;
mod slots;
pub mod sql;

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

pub use cooldown::{Cooldown, format_utc, now_ms, parse_utc};
pub use slots::{SlotGuard, SlotHolder};

use sql::{Conn, Db};

use crate::text::redact::Secrets;

/// The run-mode flags that choose the store.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct StoreArgs {
    /// Where slots, cooldowns and the routing ledger live: a SQLite file (path or
    /// sqlite:PATH) or postgres://… shared by many machines [default: <state>/coder.db].
    // `global`: `coder route stats --store URL` as well as `coder route --store URL stats`.
    #[arg(
        long = "store",
        value_name = "URL",
        env = "CODER_STORE",
        global = true,
        value_parser = crate::text::non_blank
    )]
    pub store: Option<String>,

    /// When the store cannot be opened, run anyway without slots, cooldowns or routing
    /// (and say so in the envelope's warnings) instead of failing with config_error
    /// (CODER_STORE_OPTIONAL: 1, yes, on or true)
    // The usual spellings: `1` was refused, as "invalid value '1' for '--store-optional'".
    #[arg(
        long = "store-optional",
        env = "CODER_STORE_OPTIONAL",
        global = true,
        action = clap::ArgAction::SetTrue,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub optional: bool,
}

/// Which database a store URL names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    Sqlite(PathBuf),
    /// A `postgres://` or `postgresql://` URL (libpq's connection-string forms).
    Postgres(String),
}

/// How long a SQLite writer waits for another before giving up.
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long connecting to PostgreSQL may take, unless the URL says otherwise.
const POSTGRES_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

impl Location {
    /// Parses a store URL: `postgres://…`/`postgresql://…`, `sqlite:PATH`, `sqlite://PATH`,
    /// or a plain file path (relative ones are taken from `base`).
    pub fn parse(text: &str, base: &Path) -> Result<Location, StoreError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(StoreError::BadUrl("the store URL is empty".to_owned()));
        }
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Ok(Location::Postgres(text.to_owned()));
        }
        let path = if let Some(rest) = text.strip_prefix("sqlite://") {
            rest
        } else if let Some(rest) = text.strip_prefix("sqlite:") {
            rest
        } else if let Some((scheme, _)) = text.split_once("://") {
            return Err(StoreError::BadUrl(format!(
                "unsupported store scheme '{scheme}://': use a SQLite file path (or sqlite:PATH) \
                 or postgres://user@host/db"
            )));
        } else {
            text
        };
        if path.is_empty() {
            return Err(StoreError::BadUrl(format!("'{text}' names no file")));
        }
        Ok(Location::Sqlite(base.join(path)))
    }

    /// The store a run uses: `--store`/`CODER_STORE`, else the config file's `store`
    /// (relative to that file), else `<state>/coder.db`.
    pub fn resolve(
        args: &StoreArgs,
        config_store: Option<&str>,
        config_file: Option<&Path>,
        state_dir: &Path,
    ) -> Result<Location, StoreError> {
        let named = args.store.is_some() || config_store.is_some();
        let location = Location::resolve_unchecked(args, config_store, config_file, state_dir)?;
        match named {
            true => location.in_existing_dir(),
            false => Ok(location),
        }
    }

    /// [`Location::resolve`] without checking that a named file's directory exists.
    pub fn resolve_unchecked(
        args: &StoreArgs,
        config_store: Option<&str>,
        config_file: Option<&Path>,
        state_dir: &Path,
    ) -> Result<Location, StoreError> {
        if let Some(url) = &args.store {
            let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
            return Location::parse(url, &cwd);
        }
        if let Some(url) = config_store {
            let base = config_file
                .and_then(Path::parent)
                .unwrap_or(Path::new("/"))
                .to_owned();
            return Location::parse(url, &base);
        }
        Ok(Location::Sqlite(state_dir.join("coder.db")))
    }

    /// A SQLite file the user named must be in a directory that exists: coder makes the
    /// directory of its default store (its state directory), but one the user named with a
    /// typo (`--store /date/coder.db`) was made silently, with an empty store in it that no
    /// other run shares. (`StoreError::Unreachable`: `--store-optional` runs without it.)
    fn in_existing_dir(self) -> Result<Location, StoreError> {
        if let Location::Sqlite(path) = &self
            && let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
            && !dir.is_dir()
        {
            return Err(StoreError::Unreachable {
                store: path.display().to_string(),
                reason: format!(
                    "its directory {} does not exist; create it, or name a file in a \
                     directory that does",
                    dir.display()
                ),
            });
        }
        Ok(self)
    }

    /// The location for messages: a PostgreSQL password is never shown.
    pub fn display(&self) -> String {
        match self {
            Location::Sqlite(path) => path.display().to_string(),
            Location::Postgres(url) => hide_password(url),
        }
    }

    /// Whether the store may hold anything yet: a SQLite file that does not exist holds no
    /// slot and no cooldown, so a run that needs neither need not create it.
    pub fn may_hold_state(&self) -> bool {
        match self {
            Location::Sqlite(path) => path.exists(),
            Location::Postgres(_) => true,
        }
    }
}

/// `postgres://user:secret@host/db` → `postgres://user:***@host/db`.
fn hide_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or("");
            let masked = if userinfo.contains(':') {
                format!("{user}:***")
            } else {
                user.to_owned()
            };
            let tail = mask_query_password(tail);
            format!("{scheme}://{masked}@{host}{tail}")
        }
        None => format!("{scheme}://{authority}{}", mask_query_password(tail)),
    }
}

fn mask_query_password(tail: &str) -> String {
    let Some((path, query)) = tail.split_once('?') else {
        return tail.to_owned();
    };
    let query: Vec<String> = query
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
            _ => kv.to_owned(),
        })
        .collect();
    format!("{path}?{}", query.join("&"))
}

/// What can go wrong with the store. The first four are the user's to fix and become
/// `config_error`; the rest are failures of a store that did open.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("bad store URL: {0}")]
    BadUrl(String),
    #[error("cannot reach the store {store}: {reason}")]
    Unreachable { store: String, reason: String },
    #[error("the store is not a usable coder database: {0}")]
    Corrupt(String),
    #[error(
        "the store's schema is version {found}, newer than this coder understands \
         (up to {supported}): a newer coder wrote it; upgrade coder, or use another --store"
    )]
    NewerSchema { found: i64, supported: i64 },
    #[error("store: {0}")]
    Database(String),
    #[error("the store's worker stopped")]
    Closed,
}

impl StoreError {
    fn sqlite(e: rusqlite::Error) -> StoreError {
        use rusqlite::ErrorCode;
        match e.sqlite_error_code() {
            Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
                StoreError::Corrupt(e.to_string())
            }
            _ => StoreError::Database(e.to_string()),
        }
    }

    fn postgres(e: postgres::Error) -> StoreError {
        StoreError::Database(match e.as_db_error() {
            Some(db) => format!("{}: {}", db.code().code(), db.message()),
            None => e.to_string(),
        })
    }
}

type Job = Box<dyn FnOnce(&mut Conn) + Send>;

/// An open store: its worker thread and where it points.
pub struct Store {
    jobs: mpsc::Sender<Job>,
    location: Location,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Store({})", self.location.display())
    }
}

impl Store {
    /// Opens (creating a SQLite file and its directory if needed) and migrates the store.
    /// Blocks for as long as connecting takes (bounded); call it off the async runtime.
    pub fn open(location: &Location) -> Result<Store, StoreError> {
        let (jobs, inbox) = mpsc::channel::<Job>();
        let (ready_tx, ready) = mpsc::sync_channel::<Result<(), StoreError>>(1);
        let target = location.clone();
        std::thread::Builder::new()
            .name("coder-store".to_owned())
            .spawn(move || {
                let mut conn = match connect(&target).and_then(|mut c| {
                    sql::migrate(&mut c)?;
                    Ok(c)
                }) {
                    Ok(conn) => {
                        let _ = ready_tx.send(Ok(()));
                        conn
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                while let Ok(job) = inbox.recv() {
                    job(&mut conn);
                }
            })
            .map_err(|e| StoreError::Database(format!("cannot start the store's thread: {e}")))?;
        match ready.recv() {
            Ok(Ok(())) => Ok(Store {
                jobs,
                location: location.clone(),
            }),
            Ok(Err(e)) => Err(with_location(e, location)),
            Err(_) => Err(StoreError::Closed),
        }
    }

    pub fn location(&self) -> &Location {
        &self.location
    }

    /// Redacts the known values of `secrets` (a run's keys) from every text written from
    /// now on, besides the token shapes always redacted: all writes go through
    /// [`sql::Conn`], which redacts every text parameter.
    pub fn redact_with(&self, secrets: &Secrets) -> Result<(), StoreError> {
        let values = secrets.values().to_vec();
        self.call(move |conn| {
            conn.add_secrets(&values);
            Ok(())
        })
    }

    /// Runs `job` on the store's connection and waits for its answer.
    fn call<T: Send + 'static>(
        &self,
        job: impl FnOnce(&mut Conn) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (answer_tx, answer) = mpsc::sync_channel(1);
        self.jobs
            .send(Box::new(move |conn: &mut Conn| {
                let _ = answer_tx.send(job(conn));
            }))
            .map_err(|_| StoreError::Closed)?;
        answer.recv().map_err(|_| StoreError::Closed)?
    }

    /// The request shape remembered for a backend (DESIGN §12); `None` when nothing is
    /// remembered (the full shape is the default).
    pub fn compat_shape(&self, backend: &str) -> Result<Option<RequestShape>, StoreError> {
        let backend = backend.to_owned();
        self.call(move |conn| {
            let rows = conn.query(
                "SELECT shape FROM compat WHERE backend = $1",
                &[backend.into()],
                &[sql::Col::Text],
            )?;
            Ok(rows
                .first()
                .and_then(|r| r[0].text().and_then(RequestShape::parse)))
        })
    }

    /// Remembers the request shape that works for a backend.
    pub fn set_compat_shape(
        &self,
        backend: &str,
        shape: RequestShape,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        let params = vec![
            backend.into(),
            shape.as_str().into(),
            reason.map(str::to_owned).into(),
            now_ms().into(),
        ];
        self.call(move |conn| {
            conn.exec(
                "INSERT INTO compat (backend, shape, reason, updated_ms) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (backend) DO UPDATE SET shape = excluded.shape,
                   reason = excluded.reason, updated_ms = excluded.updated_ms",
                &params,
            )
            .map(|_| ())
        })
    }
}

impl Store {
    /// Forgets the request shape remembered for `backend` (or for every backend): the next
    /// run starts in the full shape again. Returns how many were forgotten.
    pub fn forget_compat_shape(&self, backend: Option<&str>) -> Result<u64, StoreError> {
        let backend = backend.map(str::to_owned);
        self.call(move |conn| match backend {
            Some(b) => conn.exec("DELETE FROM compat WHERE backend = $1", &[b.into()]),
            None => conn.exec("DELETE FROM compat", &[]),
        })
    }
}

/// The request shape a backend takes (DESIGN §12, `provider-quirks.md` §0.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestShape {
    /// The CLI's defaults.
    Full,
    /// `--bare` with experimental betas off: no `role:"system"` message in `messages`.
    Compat,
}

impl RequestShape {
    pub fn as_str(self) -> &'static str {
        match self {
            RequestShape::Full => "full",
            RequestShape::Compat => "compat",
        }
    }

    fn parse(text: &str) -> Option<RequestShape> {
        match text {
            "full" => Some(RequestShape::Full),
            "compat" => Some(RequestShape::Compat),
            _ => None,
        }
    }
}

/// Names the store in an open error that does not already.
fn with_location(e: StoreError, location: &Location) -> StoreError {
    match e {
        StoreError::Corrupt(why) => StoreError::Corrupt(format!(
            "{} ({why}); point --store at another file (coder creates a new store where \
             none exists), or, if it is a damaged coder store, move it away to start afresh",
            location.display()
        )),
        StoreError::Database(why) => StoreError::Unreachable {
            store: location.display(),
            reason: why,
        },
        other => other,
    }
}

fn connect(location: &Location) -> Result<Conn, StoreError> {
    match location {
        Location::Sqlite(path) => open_sqlite(path),
        Location::Postgres(url) => {
            let mut config: postgres::Config = url.parse().map_err(|e: postgres::Error| {
                StoreError::BadUrl(format!("{}: {e}", hide_password(url)))
            })?;
            if config.get_connect_timeout().is_none() {
                config.connect_timeout(POSTGRES_CONNECT_TIMEOUT);
            }
            config.application_name("coder");
            let client = config
                .connect(postgres::NoTls)
                .map_err(|e| StoreError::Unreachable {
                    store: hide_password(url),
                    reason: with_causes(&e),
                })?;
            Ok(Conn::new(Db::Postgres(Box::new(client))))
        }
    }
}

/// `e` with the errors beneath it: the postgres crate says only "error connecting to
/// server", and the cause ("Connection refused", "timed out") is what the user can act on.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(inner) = cause {
        let more = inner.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        cause = inner.source();
    }
    text
}

fn open_sqlite(path: &Path) -> Result<Conn, StoreError> {
    let unreachable = |reason: String| StoreError::Unreachable {
        store: path.display().to_string(),
        reason,
    };
    if path.is_dir() {
        return Err(unreachable(format!(
            "it is a directory; name a database file, such as {}",
            path.join("coder.db").display()
        )));
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| unreachable(e.to_string()))?;
    }
    let existed = path.exists();
    let conn = rusqlite::Connection::open(path).map_err(|e| unreachable(e.to_string()))?;
    if !existed {
        restrict_to_owner(path);
    }
    conn.busy_timeout(SQLITE_BUSY_TIMEOUT)
        .map_err(StoreError::sqlite)?;
    // Switching to WAL needs a moment alone with the file: retry while others do the same.
    let mut tries = 0;
    loop {
        let result = conn
            .pragma_update(None, "journal_mode", "WAL")
            .map_err(StoreError::sqlite);
        match result {
            Ok(()) => break,
            Err(StoreError::Database(_)) if tries < 50 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20 * tries));
            }
            Err(e) => return Err(e),
        }
    }
    let mut conn = Conn::new(Db::Sqlite(conn));
    conn.batch("PRAGMA synchronous = NORMAL")?;
    Ok(conn)
}

/// The store holds which runs happen where; owner-only like the rest of `<state>`.
fn restrict_to_owner(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_pick_a_dialect_or_are_refused() {
        let base = Path::new("/base");
        assert_eq!(
            Location::parse("postgres://u@h/db", base).unwrap(),
            Location::Postgres("postgres://u@h/db".into())
        );
        assert_eq!(
            Location::parse("sqlite:x.db", base).unwrap(),
            Location::Sqlite("/base/x.db".into())
        );
        assert_eq!(
            Location::parse("sqlite:///abs/x.db", base).unwrap(),
            Location::Sqlite("/abs/x.db".into())
        );
        assert_eq!(
            Location::parse("/abs/y.db", base).unwrap(),
            Location::Sqlite("/abs/y.db".into())
        );
        let err = Location::parse("mysql://h/db", base).unwrap_err();
        assert!(err.to_string().contains("mysql://"), "{err}");
        assert!(Location::parse("  ", base).is_err());
    }

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(
            hide_password("postgres://u:s3cret@h:5432/db?sslmode=disable&password=x"),
            "postgres://u:***@h:5432/db?sslmode=disable&password=***"
        );
        assert_eq!(hide_password("postgres://h/db"), "postgres://h/db");
    }

    #[test]
    fn compat_shapes_are_remembered() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&Location::Sqlite(dir.path().join("s.db"))).unwrap();
        assert_eq!(store.compat_shape("glm").unwrap(), None);
        store
            .set_compat_shape("glm", RequestShape::Compat, Some("422 system role"))
            .unwrap();
        assert_eq!(
            store.compat_shape("glm").unwrap(),
            Some(RequestShape::Compat)
        );
        assert_eq!(store.forget_compat_shape(Some("other")).unwrap(), 0);
        assert_eq!(store.forget_compat_shape(Some("glm")).unwrap(), 1);
        assert_eq!(store.compat_shape("glm").unwrap(), None);
    }

    /// Writes a row through every writer of the store with a known key and an unknown
    /// token planted in each text, then reads every text cell of every table straight from
    /// the file: none may hold either (a column added later is read too).
    #[test]
    fn every_text_the_store_keeps_is_redacted() {
        use crate::routing::ledger::{Choice, Ledger};
        const KEY: &str = "zk-Tq81Lm9Xv2Pw7Rb4Hc6N";
        const TOKEN: &str = "ghp_H5jD8sF2kL0qW9eR4tY7uI1o";
        let planted = |field: &str| format!("{field}: {KEY} {TOKEN}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("coder.db");
        let store = Store::open(&Location::Sqlite(path.clone())).unwrap();
        store.redact_with(&Secrets::new([KEY])).unwrap();
        store
            .set_cooldown(&Cooldown {
                backend: planted("backend"),
                until_ms: now_ms() + 60_000,
                retry_at: planted("retry_at"),
                class: planted("class"),
                provider: planted("provider"),
                code: Some(planted("code")),
                http_status: Some(429),
                message: planted("message"),
                set_by: planted("set_by"),
            })
            .unwrap();
        store
            .set_compat_shape(
                &planted("b"),
                RequestShape::Compat,
                Some(&planted("reason")),
            )
            .unwrap();
        store
            .try_acquire_slot(
                &planted("b"),
                2,
                &planted("holder"),
                Duration::from_secs(60),
            )
            .unwrap();
        let choice = Choice {
            run_id: planted("run"),
            bucket: planted("bucket"),
            chosen: planted("chosen"),
            candidates: vec![planted("candidate")],
            propensity: 0.5,
            policy: planted("policy"),
            at_unix_ms: now_ms(),
        };
        store.record_choice(&choice).unwrap();
        assert!(store.is_cooling(&planted("backend")).unwrap());
        drop(store);
        let conn = rusqlite::Connection::open(&path).unwrap();
        let mut redacted = 0;
        let tables: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(tables.len() >= 5, "{tables:?}");
        for table in tables {
            let mut stmt = conn.prepare(&format!("SELECT * FROM {table}")).unwrap();
            let columns = stmt.column_count();
            let mut rows = stmt.query([]).unwrap();
            while let Some(row) = rows.next().unwrap() {
                for i in 0..columns {
                    let rusqlite::types::ValueRef::Text(text) = row.get_ref(i).unwrap() else {
                        continue;
                    };
                    let text = String::from_utf8_lossy(text);
                    assert!(!text.contains(&KEY[3..]), "{table}: {text}");
                    assert!(!text.contains(&TOKEN[4..]), "{table}: {text}");
                    redacted += text.matches(crate::text::REDACTED).count();
                }
            }
        }
        assert!(
            redacted >= 2 * 14,
            "{redacted} redactions: a row is missing"
        );
    }

    #[test]
    fn a_corrupt_file_is_named_as_such() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("coder.db");
        std::fs::write(&path, vec![b'x'; 8192]).unwrap();
        let err = Store::open(&Location::Sqlite(path)).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
        assert!(err.to_string().contains("coder.db"), "{err}");
    }
}
