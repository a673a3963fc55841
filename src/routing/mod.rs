//! Routing: which backend runs a task when the caller says `--backend auto` (DESIGN §10).
//!
//! The policy (Thompson sampling over per-(backend, bucket) Beta posteriors, [`policy`])
//! is pure logic over tallies; the request's class is its [`bucket`]; what it learns from
//! is a [`ledger::Ledger`]. This module's glue turns a run's `--backend auto[:a,b]` into a
//! concrete backend name before the backend is resolved, and feeds the run's outcome back
//! afterwards. The policy only sees the [`ledger::Ledger`] trait and a cooling predicate;
//! both come from the store ([`open_store`]).

pub mod bucket;
pub mod ledger;
pub mod memory;
pub mod policy;
pub mod rng;
pub mod sim;

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;

use serde::Serialize;

use crate::config::{self, BackendArgs};
use crate::store::{Location, Store, StoreArgs};
use bucket::{Bucket, BucketInput};
use ledger::{Choice, Ledger, LedgerError, Verdict};
use policy::{Decision, PolicyKind};
use rng::Rng;

/// The backends plain `auto` considers, besides the config file's own `[backends.NAME]`
/// tables; only those whose key is set take part.
pub const AUTO_PRESETS: [&str; 3] = ["glm", "deepseek", "minimax"];

/// The store routing learns from and records to: `--store`/`CODER_STORE`, else the
/// config file's `store`, else `<state>/coder.db` — the same store that holds the slots
/// and cooldowns, so every coder sharing a store learns from every routed run.
pub fn open_store(
    state_dir: &Path,
    store: &StoreArgs,
    args: &BackendArgs,
    env: &[(OsString, OsString)],
) -> Result<Arc<Store>, LedgerError> {
    let (url, file) = config::store_setting(args, env).map_err(|e| LedgerError(e.to_string()))?;
    let location = Location::resolve(store, url.as_deref(), file.as_deref(), state_dir)?;
    Ok(Arc::new(Store::open(&location)?))
}

#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    #[error("--backend {spec}: {name:?} is not a usable backend: {reason}")]
    Unusable {
        spec: String,
        name: String,
        reason: String,
    },
    #[error("--backend {spec}: {message}")]
    Bad { spec: String, message: String },
}

impl RouteError {
    /// What is wrong, without the `--backend SPEC: ` the message starts with: for a
    /// caller that routed among the default candidates without any `--backend` given.
    pub fn detail(&self) -> String {
        match self {
            RouteError::Unusable { name, reason, .. } => {
                format!("{name:?} is not a usable backend: {reason}")
            }
            RouteError::Bad { message, .. } => message.clone(),
        }
    }

    fn bad(spec: &str, message: impl Into<String>) -> Self {
        RouteError::Bad {
            spec: spec.to_owned(),
            message: message.into(),
        }
    }
}

/// `auto` (the default candidate set) or `auto:a,b,c`; `None` for any other name.
pub fn parse_auto(name: &str) -> Option<Option<Vec<String>>> {
    if name == "auto" {
        return Some(None);
    }
    let list = name.strip_prefix("auto:")?;
    Some(Some(list.split(',').map(|s| s.trim().to_owned()).collect()))
}

/// Whether `CODER_ROUTING=off` (or `0`, `false`) turns routing off.
pub fn routing_off(env: &[(OsString, OsString)]) -> bool {
    env.iter().any(|(k, v)| {
        k == "CODER_ROUTING"
            && matches!(
                v.to_string_lossy().trim().to_ascii_lowercase().as_str(),
                "off" | "0" | "false" | "no"
            )
    })
}

/// The candidate backends of `spec` (`auto` or `auto:…`): an explicit list must name
/// backends that resolve (an unknown one, or one without its key, is a `config_error`);
/// plain `auto` takes every usable preset of [`AUTO_PRESETS`] and config table.
pub fn candidates(
    spec: &str,
    list: Option<Vec<String>>,
    args: &BackendArgs,
    env: &[(OsString, OsString)],
) -> Result<Vec<String>, RouteError> {
    let resolves = |name: &str| {
        let mut one = args.clone();
        one.backend = Some(name.to_owned());
        config::resolve_backend(&one, env).map(|_| ())
    };
    match list {
        Some(names) => {
            let mut out: Vec<String> = Vec::new();
            for name in names {
                if name.is_empty() || name == "auto" || name.starts_with("auto:") {
                    return Err(RouteError::bad(
                        spec,
                        "name backends separated by commas, as in auto:glm,deepseek",
                    ));
                }
                if let Err(e) = resolves(&name) {
                    return Err(RouteError::Unusable {
                        spec: spec.to_owned(),
                        name,
                        reason: e.to_string(),
                    });
                }
                if !out.contains(&name) {
                    out.push(name);
                }
            }
            Ok(out)
        }
        None => {
            let (_, tables) = config::routing_names(args, env)
                .map_err(|e| RouteError::bad(spec, e.to_string()))?;
            let mut out: Vec<String> = Vec::new();
            for name in AUTO_PRESETS.iter().map(|s| s.to_string()).chain(tables) {
                if !out.contains(&name) && resolves(&name).is_ok() {
                    out.push(name);
                }
            }
            if out.is_empty() {
                return Err(RouteError::bad(
                    spec,
                    "no backend is usable: set the key of glm, deepseek or minimax (see coder doctor) \
                     or name backends with auto:NAME,NAME",
                ));
            }
            Ok(out)
        }
    }
}

/// The envelope's `routing` object.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoutingReport {
    pub chosen: String,
    pub candidates: Vec<String>,
    pub bucket: serde_json::Value,
    pub propensity: f64,
    pub policy: PolicyKind,
    /// Candidates skipped because they are cooling down.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cooling: Vec<String>,
}

/// A routed run: what was decided, and where its outcome goes.
pub struct Routed {
    pub report: RoutingReport,
    pub decision: Decision,
    pub bucket: Bucket,
    ledger: Option<Box<dyn Ledger>>,
    run_id: String,
    /// Problems with the ledger (the run goes on without learning).
    pub warnings: Vec<String>,
}

/// Everything a routing decision depends on.
pub struct RouteContext<'a> {
    pub spec: &'a str,
    pub list: Option<Vec<String>>,
    pub args: &'a BackendArgs,
    pub env: &'a [(OsString, OsString)],
    pub state_dir: &'a Path,
    /// `--store` / `CODER_STORE`: where the ledger and cooldowns live.
    pub store: &'a StoreArgs,
    pub input: BucketInput,
    pub run_id: &'a str,
    /// The backend of the session being resumed, when coder has its record: a resume goes
    /// back to it when it is a candidate (another backend could not continue the session).
    pub session_backend: Option<String>,
}

/// The seed `CODER_ROUTING_SEED` names (reproducible choices in tests), else entropy.
pub fn rng_from(env: &[(OsString, OsString)]) -> Rng {
    env.iter()
        .find(|(k, _)| k == "CODER_ROUTING_SEED")
        .and_then(|(_, v)| v.to_str()?.trim().parse::<u64>().ok())
        .map_or_else(Rng::from_entropy, Rng::seeded)
}

/// Decide which backend runs (without recording anything).
pub fn decide(ctx: &RouteContext<'_>) -> Result<Routed, RouteError> {
    let candidates = candidates(ctx.spec, ctx.list.clone(), ctx.args, ctx.env)?;
    let bucket = Bucket::of(ctx.input);
    let mut warnings = Vec::new();
    let store = match open_store(ctx.state_dir, ctx.store, ctx.args, ctx.env) {
        Ok(store) => Some(store),
        Err(e) => {
            warnings.push(format!("routing learns nothing from this run: {e}"));
            None
        }
    };
    let ledger = store.clone().map(|s| Box::new(s) as Box<dyn Ledger>);
    let tallies = match ledger.as_ref().map(|l| l.tallies(&candidates)) {
        Some(Ok(t)) => t,
        Some(Err(e)) => {
            warnings.push(format!("routing ignores its history: {e}"));
            Vec::new()
        }
        None => Vec::new(),
    };
    let session = ctx
        .session_backend
        .as_ref()
        .filter(|b| candidates.contains(b));
    let decision = if let Some(backend) = session {
        policy::pinned(backend, &candidates, bucket, &tallies, PolicyKind::Session)
    } else if routing_off(ctx.env) {
        let (default, _) = config::routing_names(ctx.args, ctx.env)
            .map_err(|e| RouteError::bad(ctx.spec, e.to_string()))?;
        policy::pinned(&default, &candidates, bucket, &tallies, PolicyKind::Pinned)
    } else {
        // A store that cannot answer is not a cooldown: the run itself then fails fast
        // through admission if the backend really is cooling.
        let cooling = |backend: &str| {
            store
                .as_ref()
                .is_some_and(|s| s.is_cooling(backend).unwrap_or(false))
        };
        policy::decide(
            &candidates,
            bucket,
            &tallies,
            &cooling,
            &mut rng_from(ctx.env),
            policy::DRAWS,
        )
    };
    let report = RoutingReport {
        chosen: decision.chosen.clone(),
        candidates: candidates.clone(),
        bucket: bucket.to_json(),
        propensity: decision.propensity,
        policy: decision.policy,
        cooling: decision
            .arms
            .iter()
            .filter(|a| a.cooling)
            .map(|a| a.backend.clone())
            .collect(),
    };
    Ok(Routed {
        report,
        decision,
        bucket,
        ledger,
        run_id: ctx.run_id.to_owned(),
        warnings,
    })
}

impl Routed {
    /// Records the choice in the ledger (before the run starts, so that a run killed
    /// midway still shows its choice).
    pub fn record_choice(&mut self) {
        let Some(ledger) = &self.ledger else { return };
        let choice = Choice {
            run_id: self.run_id.clone(),
            bucket: self.bucket.key(),
            chosen: self.report.chosen.clone(),
            candidates: self.report.candidates.clone(),
            propensity: self.report.propensity,
            policy: self.report.policy.as_str().to_owned(),
            at_unix_ms: now_ms(),
        };
        if let Err(e) = ledger.record_choice(&choice) {
            self.warnings
                .push(format!("routing learns nothing from this run: {e}"));
            self.ledger = None;
        }
    }

    /// Records the run's outcome; `None` (a cancelled run, a bad configuration) says
    /// nothing about the backend and is not recorded.
    pub fn record_outcome(&mut self, verdict: Option<Verdict>) {
        let (Some(ledger), Some(verdict)) = (&self.ledger, verdict) else {
            return;
        };
        if let Err(e) = ledger.record_outcome(&self.run_id, verdict) {
            self.warnings
                .push(format!("routing could not record this run's outcome: {e}"));
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_specs_parse_and_routing_off_is_read() {
        assert_eq!(parse_auto("auto"), Some(None));
        assert_eq!(
            parse_auto("auto:glm, deepseek"),
            Some(Some(vec!["glm".to_string(), "deepseek".to_string()]))
        );
        assert_eq!(parse_auto("glm"), None);
        assert_eq!(parse_auto("autox"), None);
        let env = |v: &str| vec![(OsString::from("CODER_ROUTING"), OsString::from(v))];
        assert!(routing_off(&env("off")) && routing_off(&env("0")) && routing_off(&env("OFF")));
        assert!(!routing_off(&env("on")) && !routing_off(&[]));
    }
}
