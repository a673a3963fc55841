//! The two SQL dialects behind one tiny interface: a connection ([`Conn`]) that runs a
//! statement with positional parameters (`$1`, `$2`, … in the text; rewritten to SQLite's
//! `?1` form) and reads rows of a few plain types ([`Val`]), plus the versioned schema and
//! its migrations.
//!
//! Why not an ORM or `sqlx`: the store has a handful of statements, and the only portable
//! subset needed (TEXT, BIGINT, DOUBLE PRECISION, `ON CONFLICT`) is written once here. Both
//! drivers are synchronous; the store calls them from its own worker thread (see
//! `super::worker`), never from inside the tokio runtime.

use std::borrow::Cow;

use super::StoreError;
use crate::text::redact::Secrets;

/// One parameter or column value.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    Int(i64),
    Real(f64),
    Text(String),
    Null,
}

impl Val {
    pub fn int(&self) -> Option<i64> {
        match self {
            Val::Int(i) => Some(*i),
            _ => None,
        }
    }

    pub fn text(&self) -> Option<&str> {
        match self {
            Val::Text(t) => Some(t),
            _ => None,
        }
    }

    pub fn real(&self) -> Option<f64> {
        match self {
            Val::Real(r) => Some(*r),
            Val::Int(i) => Some(*i as f64),
            _ => None,
        }
    }
}

impl From<&str> for Val {
    fn from(s: &str) -> Val {
        Val::Text(s.to_owned())
    }
}

impl From<String> for Val {
    fn from(s: String) -> Val {
        Val::Text(s)
    }
}

impl From<i64> for Val {
    fn from(i: i64) -> Val {
        Val::Int(i)
    }
}

impl From<f64> for Val {
    fn from(f: f64) -> Val {
        Val::Real(f)
    }
}

impl<T: Into<Val>> From<Option<T>> for Val {
    fn from(v: Option<T>) -> Val {
        v.map_or(Val::Null, Into::into)
    }
}

/// What a result column holds, so each driver reads it with the right type.
#[derive(Debug, Clone, Copy)]
pub enum Col {
    Int,
    Real,
    Text,
}

impl rusqlite::ToSql for Val {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, Value, ValueRef};
        Ok(match self {
            Val::Int(i) => ToSqlOutput::Owned(Value::Integer(*i)),
            Val::Real(r) => ToSqlOutput::Owned(Value::Real(*r)),
            Val::Text(t) => ToSqlOutput::Borrowed(ValueRef::Text(t.as_bytes())),
            Val::Null => ToSqlOutput::Owned(Value::Null),
        })
    }
}

impl postgres::types::ToSql for Val {
    fn to_sql(
        &self,
        ty: &postgres::types::Type,
        out: &mut postgres::types::private::BytesMut,
    ) -> Result<postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Val::Int(i) => i.to_sql(ty, out),
            Val::Real(r) => r.to_sql(ty, out),
            Val::Text(t) => t.as_str().to_sql(ty, out),
            Val::Null => Ok(postgres::types::IsNull::Yes),
        }
    }

    fn accepts(ty: &postgres::types::Type) -> bool {
        use postgres::types::Type;
        [Type::INT8, Type::FLOAT8, Type::TEXT, Type::VARCHAR].contains(ty)
    }

    postgres::types::to_sql_checked!();
}

/// A connection of either dialect.
pub enum Db {
    Sqlite(rusqlite::Connection),
    Postgres(Box<postgres::Client>),
}

/// An open connection, and what is redacted from every text it is given.
///
/// Every statement's text parameters pass through [`Conn::exec`] or [`Conn::query`], so
/// this is the one place where what coder stores is redacted: token shapes always, and the
/// known values added with [`Conn::add_secrets`] (a run's keys). A column written later
/// from the vendor's or the model's text is redacted without anyone remembering to.
pub struct Conn {
    db: Db,
    secrets: Secrets,
}

impl Conn {
    pub fn new(db: Db) -> Conn {
        Conn {
            db,
            secrets: Secrets::default(),
        }
    }

    /// Redacts `values` too from every text given from now on.
    pub fn add_secrets(&mut self, values: &[String]) {
        let known = self.secrets.values().iter().chain(values);
        self.secrets = Secrets::new(known);
    }

    /// `params` with their texts redacted (borrowed when none changes).
    fn redacted<'a>(&self, params: &'a [Val]) -> Cow<'a, [Val]> {
        let changed = |v: &Val| {
            v.text()
                .is_some_and(|t| matches!(self.secrets.redact(t), Cow::Owned(_)))
        };
        if !params.iter().any(changed) {
            return Cow::Borrowed(params);
        }
        let redact = |v: &Val| match v {
            Val::Text(t) => Val::Text(self.secrets.redact(t).into_owned()),
            other => other.clone(),
        };
        Cow::Owned(params.iter().map(redact).collect())
    }

    /// Runs a statement; returns the number of rows it changed.
    pub fn exec(&mut self, sql: &str, params: &[Val]) -> Result<u64, StoreError> {
        let params = self.redacted(params);
        let params = params.as_ref();
        match &mut self.db {
            Db::Sqlite(c) => {
                let sql = sqlite_text(sql);
                let n = c
                    .execute(&sql, rusqlite::params_from_iter(params.iter()))
                    .map_err(StoreError::sqlite)?;
                Ok(n as u64)
            }
            Db::Postgres(c) => {
                let refs: Vec<&(dyn postgres::types::ToSql + Sync)> = params
                    .iter()
                    .map(|p| p as &(dyn postgres::types::ToSql + Sync))
                    .collect();
                c.execute(sql, &refs).map_err(StoreError::postgres)
            }
        }
    }

    /// Runs a query; each row holds the columns `cols` describes, in order.
    pub fn query(
        &mut self,
        sql: &str,
        params: &[Val],
        cols: &[Col],
    ) -> Result<Vec<Vec<Val>>, StoreError> {
        // Keys are looked up as they were written: redacted alike.
        let params = self.redacted(params);
        let params = params.as_ref();
        match &mut self.db {
            Db::Sqlite(c) => {
                let sql = sqlite_text(sql);
                let mut stmt = c.prepare(&sql).map_err(StoreError::sqlite)?;
                let rows = stmt
                    .query_map(rusqlite::params_from_iter(params.iter()), |row| {
                        cols.iter()
                            .enumerate()
                            .map(|(i, col)| sqlite_column(row, i, *col))
                            .collect::<rusqlite::Result<Vec<Val>>>()
                    })
                    .map_err(StoreError::sqlite)?;
                rows.collect::<rusqlite::Result<Vec<_>>>()
                    .map_err(StoreError::sqlite)
            }
            Db::Postgres(c) => {
                let refs: Vec<&(dyn postgres::types::ToSql + Sync)> = params
                    .iter()
                    .map(|p| p as &(dyn postgres::types::ToSql + Sync))
                    .collect();
                let rows = c.query(sql, &refs).map_err(StoreError::postgres)?;
                rows.iter()
                    .map(|row| {
                        cols.iter()
                            .enumerate()
                            .map(|(i, col)| postgres_column(row, i, *col))
                            .collect()
                    })
                    .collect()
            }
        }
    }

    /// Runs statements with no parameters and no results (DDL, transaction control).
    pub fn batch(&mut self, sql: &str) -> Result<(), StoreError> {
        match &mut self.db {
            Db::Sqlite(c) => c.execute_batch(sql).map_err(StoreError::sqlite),
            Db::Postgres(c) => c.batch_execute(sql).map_err(StoreError::postgres),
        }
    }

    pub fn is_postgres(&self) -> bool {
        matches!(self.db, Db::Postgres(_))
    }

    /// Runs `body` in a write transaction that serialises with every other writer of the
    /// store (SQLite: `BEGIN IMMEDIATE`; PostgreSQL: a transaction-scoped advisory lock).
    pub fn serialized<T>(
        &mut self,
        body: impl FnOnce(&mut Conn) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        match self.db {
            Db::Sqlite(_) => self.batch("BEGIN IMMEDIATE")?,
            Db::Postgres(_) => {
                self.batch("BEGIN")?;
                if let Err(e) = self.batch(&format!("SELECT pg_advisory_xact_lock({LOCK_KEY})")) {
                    let _ = self.batch("ROLLBACK");
                    return Err(e);
                }
            }
        }
        match body(self) {
            Ok(value) => {
                self.batch("COMMIT")?;
                Ok(value)
            }
            Err(e) => {
                let _ = self.batch("ROLLBACK");
                Err(e)
            }
        }
    }
}

/// The advisory lock key coder's store transactions take on PostgreSQL ("coder" in ASCII).
const LOCK_KEY: i64 = 0x0063_6f64_6572;

/// `$1` → `?1`: SQLite's explicit positional form (no `$` appears in coder's SQL otherwise).
fn sqlite_text(sql: &str) -> String {
    sql.replace('$', "?")
}

fn sqlite_column(row: &rusqlite::Row<'_>, i: usize, col: Col) -> rusqlite::Result<Val> {
    Ok(match col {
        Col::Int => row.get::<_, Option<i64>>(i)?.into(),
        Col::Real => row.get::<_, Option<f64>>(i)?.into(),
        Col::Text => row.get::<_, Option<String>>(i)?.into(),
    })
}

fn postgres_column(row: &postgres::Row, i: usize, col: Col) -> Result<Val, StoreError> {
    let v = match col {
        Col::Int => row.try_get::<_, Option<i64>>(i).map(Val::from),
        Col::Real => row.try_get::<_, Option<f64>>(i).map(Val::from),
        Col::Text => row.try_get::<_, Option<String>>(i).map(Val::from),
    };
    v.map_err(StoreError::postgres)
}

/// The schema version this coder writes and understands.
pub const SCHEMA_VERSION: i64 = 1;

/// Migration `n` (index `n - 1`) takes the schema from version `n - 1` to `n`. The same
/// text serves both dialects: TEXT, BIGINT and DOUBLE PRECISION mean the same in each.
const MIGRATIONS: &[&str] = &[
    // 1: the routing ledger, slots, cooldowns and the per-backend request shape.
    "CREATE TABLE IF NOT EXISTS routing_choices (
        run_id TEXT PRIMARY KEY,
        bucket TEXT NOT NULL,
        chosen TEXT NOT NULL,
        candidates TEXT NOT NULL,
        propensity DOUBLE PRECISION NOT NULL,
        policy TEXT NOT NULL,
        at_ms BIGINT NOT NULL,
        outcome TEXT,
        outcome_at_ms BIGINT
    );
    CREATE INDEX IF NOT EXISTS routing_choices_chosen ON routing_choices (chosen, bucket);
    CREATE TABLE IF NOT EXISTS slots (
        backend TEXT NOT NULL,
        slot BIGINT NOT NULL,
        holder TEXT NOT NULL,
        host TEXT NOT NULL,
        pid BIGINT NOT NULL,
        acquired_ms BIGINT NOT NULL,
        expires_ms BIGINT NOT NULL,
        PRIMARY KEY (backend, slot)
    );
    CREATE TABLE IF NOT EXISTS cooldowns (
        backend TEXT PRIMARY KEY,
        until_ms BIGINT NOT NULL,
        retry_at TEXT NOT NULL,
        class TEXT NOT NULL,
        provider TEXT NOT NULL,
        code TEXT,
        http_status BIGINT,
        message TEXT NOT NULL,
        set_by TEXT NOT NULL,
        set_at_ms BIGINT NOT NULL
    );
    CREATE TABLE IF NOT EXISTS compat (
        backend TEXT PRIMARY KEY,
        shape TEXT NOT NULL,
        reason TEXT,
        updated_ms BIGINT NOT NULL
    );",
];

/// Brings the schema to [`SCHEMA_VERSION`], or refuses a store a newer coder wrote.
pub fn migrate(conn: &mut Conn) -> Result<(), StoreError> {
    // Fast path: an up-to-date store needs one read, no write lock.
    if let Ok(Some(found)) = version(conn) {
        return check_version(found).map(|_| ());
    }
    conn.serialized(|conn| {
        conn.batch("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")?;
        let found = version(conn)?.unwrap_or(0);
        if check_version(found)? {
            return Ok(());
        }
        for (index, migration) in MIGRATIONS.iter().enumerate().skip(found as usize) {
            conn.batch(migration)?;
            conn.exec(
                "INSERT INTO meta (key, value) VALUES ('schema_version', $1)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                &[Val::Text((index as i64 + 1).to_string())],
            )?;
        }
        Ok(())
    })
}

/// `Ok(true)`: current; `Ok(false)`: older, to migrate; `Err`: newer than this coder.
fn check_version(found: i64) -> Result<bool, StoreError> {
    if found > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(found == SCHEMA_VERSION)
}

/// The recorded schema version; `None` when the store has no `meta` table yet.
fn version(conn: &mut Conn) -> Result<Option<i64>, StoreError> {
    let exists = match conn.db {
        Db::Sqlite(_) => conn.query(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'meta'",
            &[],
            &[Col::Text],
        )?,
        Db::Postgres(_) => conn.query(
            "SELECT table_name::text FROM information_schema.tables
             WHERE table_schema = current_schema() AND table_name = 'meta'",
            &[],
            &[Col::Text],
        )?,
    };
    if exists.is_empty() {
        return Ok(None);
    }
    let rows = conn.query(
        "SELECT value FROM meta WHERE key = 'schema_version'",
        &[],
        &[Col::Text],
    )?;
    let Some(text) = rows.first().and_then(|r| r[0].text().map(str::to_owned)) else {
        return Ok(Some(0));
    };
    text.trim()
        .parse()
        .map(Some)
        .map_err(|_| StoreError::Corrupt(format!("schema_version is '{text}', not a number")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positional_parameters_become_sqlites() {
        assert_eq!(
            sqlite_text("SELECT a FROM t WHERE b = $1 AND c = $2"),
            "SELECT a FROM t WHERE b = ?1 AND c = ?2"
        );
    }

    #[test]
    fn migrates_once_and_refuses_a_newer_schema() {
        let mut conn = Conn::new(Db::Sqlite(rusqlite::Connection::open_in_memory().unwrap()));
        migrate(&mut conn).unwrap();
        migrate(&mut conn).unwrap();
        assert_eq!(version(&mut conn).unwrap(), Some(SCHEMA_VERSION));
        conn.exec(
            "UPDATE meta SET value = '99' WHERE key = 'schema_version'",
            &[],
        )
        .unwrap();
        let err = migrate(&mut conn).unwrap_err();
        assert!(
            matches!(err, StoreError::NewerSchema { found: 99, .. }),
            "{err}"
        );
    }
}
