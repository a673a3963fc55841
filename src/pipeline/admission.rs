//! Admission: whether a run may start on its backend now, and what it leaves behind for the
//! runs after it (DESIGN §10). Before the first attempt: a backend in cooldown fails fast
//! (`upstream_error` with `provider_error.retry_at`, the CLI never started); a backend with
//! `max_concurrent` needs a slot in the store, and the run waits for one in phase `queued`
//! (bounded by `--max-duration`, cancellable, never by the idle clock, which only runs
//! while a child does). After the run: a quota or rate-limit failure with a reset time puts
//! the backend in cooldown for every coder sharing the store; the slot is released.
//!
//! The store is opened only when needed: a run with no slot limit on a SQLite store that
//! does not exist yet has nothing to check, and pays nothing. An unreachable or unusable
//! store is a `config_error`, unless `--store-optional` lets the run go on without slots
//! and cooldowns (with a warning saying so).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::config::ResolvedBackend;
use crate::exit::ErrorKind;
use crate::journal::{Journal, Note};
use crate::pipeline::envelope::Envelope;
use crate::pipeline::provider::{self, Provider, ProviderAction, ProviderClass, ProviderError};
use crate::pipeline::request::RunRequest;
use crate::store::{self, Cooldown, Location, RequestShape, SlotGuard, Store, StoreError};
use crate::supervise::CancelSignals;
use crate::text::Secrets;

/// Why a run does not start.
pub enum Refusal {
    /// It fails before any attempt: the envelope's kind, summary, message and details.
    Fail(Box<Refused>),
    /// coder was cancelled (by this signal) while queued, after waiting this long (ms).
    Cancelled(i32, u64),
}

pub struct Refused {
    pub kind: ErrorKind,
    pub summary: String,
    pub message: String,
    pub hint: Option<String>,
    pub provider_error: Option<ProviderError>,
    /// How long the run waited for a slot before it was refused (`metrics.queue_ms`).
    pub queue_ms: Option<u64>,
}

fn refuse(kind: ErrorKind, message: String, hint: Option<String>) -> Refusal {
    Refusal::Fail(Box::new(Refused {
        kind,
        summary: message.clone(),
        message,
        hint,
        provider_error: None,
        queue_ms: None,
    }))
}

/// A run admitted to its backend: the store (when open), the slot it holds, its queue time.
pub struct Admission {
    backend: String,
    /// This run in the store's records (slot holder, cooldown author).
    holder: String,
    location: Option<Location>,
    store: Option<Arc<Store>>,
    slot: Option<SlotGuard>,
    queue_ms: Option<u64>,
}

/// How often a queued run looks for a free slot.
const QUEUE_POLL: Duration = Duration::from_millis(400);

/// Admits the run on `backend`: cooldown check, then a slot when the backend has a limit.
pub async fn admit(
    request: &RunRequest,
    backend: &ResolvedBackend,
    state_dir: &std::path::Path,
    deadline: Option<Instant>,
    signals: &mut CancelSignals,
    journal: &mut dyn Journal,
    warnings: &mut Vec<String>,
) -> Result<Admission, Refusal> {
    let Some(location) = store_location(request, backend, state_dir, warnings)? else {
        return Ok(Admission {
            backend: backend.name().to_owned(),
            holder: holder_id(),
            location: None,
            store: None,
            slot: None,
            queue_ms: None,
        });
    };
    refuse_inside_workspace(&location, &request.workspace)?;
    refuse_in_agent_grant(&location, request)?;
    let limit = backend.max_concurrent().filter(|n| *n > 0);
    let mut admission = Admission {
        backend: backend.name().to_owned(),
        holder: holder_id(),
        location: Some(location.clone()),
        store: None,
        slot: None,
        queue_ms: None,
    };
    if limit.is_none() && !location.may_hold_state() {
        return Ok(admission);
    }
    let store = match open(location.clone()).await {
        Ok(store) => store,
        Err(e) if request.store.optional => {
            warnings.push(format!(
                "{e}; running without slots, cooldowns or routing (--store-optional)"
            ));
            admission.location = None;
            return Ok(admission);
        }
        Err(e) => {
            return Err(refuse(
                ErrorKind::ConfigError,
                e.to_string(),
                Some(
                    "fix --store / CODER_STORE / the config file's `store`, or pass \
                     --store-optional to run without slots, cooldowns and routing"
                        .to_owned(),
                ),
            ));
        }
    };
    admission.store = Some(store.clone());
    let forget = forget_command(&admission.backend, &location, state_dir);
    check_cooldown(&store, &admission.backend, &forget).await?;
    if let Some(max) = limit {
        let (slot, queue_ms) = take_slot(
            &store,
            (&admission.backend, &admission.holder),
            max,
            deadline,
            signals,
            journal,
        )
        .await?;
        admission.slot = Some(slot);
        admission.queue_ms = Some(queue_ms);
        // Another coder may have hit the quota while this one waited.
        check_cooldown(&store, &admission.backend, &forget).await?;
    }
    Ok(admission)
}

/// Where the run's store is; `None` when it cannot be reached and `--store-optional` lets
/// the run go on without it (a warning says so).
fn store_location(
    request: &RunRequest,
    backend: &ResolvedBackend,
    state_dir: &std::path::Path,
    warnings: &mut Vec<String>,
) -> Result<Option<Location>, Refusal> {
    let args = &request.store;
    match Location::resolve(args, backend.store(), backend.config_file(), state_dir) {
        Ok(location) => Ok(Some(location)),
        // A named file in a directory that does not exist: a store inside the workspace
        // or a grant is refused first, as it would be once the directory exists.
        Err(e @ crate::store::StoreError::Unreachable { .. }) => {
            if let Ok(unchecked) =
                Location::resolve_unchecked(args, backend.store(), backend.config_file(), state_dir)
            {
                refuse_inside_workspace(&unchecked, &request.workspace)?;
                refuse_in_agent_grant(&unchecked, request)?;
            }
            if !args.optional {
                return Err(refuse(ErrorKind::ConfigError, e.to_string(), None));
            }
            warnings.push(format!(
                "{e}; running without slots, cooldowns or routing (--store-optional)"
            ));
            Ok(None)
        }
        Err(e) => Err(refuse(ErrorKind::ConfigError, e.to_string(), None)),
    }
}

impl Admission {
    /// The open store, for the routing ledger (`None` when no store feature needed one).
    pub fn store(&self) -> Option<&Arc<Store>> {
        self.store.as_ref()
    }

    /// Records what the finished run means for later runs and completes its envelope:
    /// `metrics.queue_ms`, and a cooldown when it ended on a quota or rate limit with a
    /// reset time. Releases the slot.
    ///
    /// The cooldown's message (the vendor's error, which can quote the caller's key) and
    /// every other text of it are redacted with `secrets` where the store writes them
    /// ([`Admission::store_for_writing`]): every later run refused by the cooldown shows
    /// them, also on machines sharing the store whose environment does not hold this run's
    /// key, and the store keeps them at rest.
    pub async fn finish(mut self, envelope: &mut Envelope, secrets: &Secrets) {
        if let (Some(ms), Some(metrics)) = (self.queue_ms, envelope.metrics.as_mut()) {
            metrics.queue_ms = Some(ms);
        }
        drop(self.slot.take());
        let Some(cooldown) = cooldown_from(envelope, &self.backend, &self.holder) else {
            return;
        };
        let what = "cannot record the backend's cooldown";
        let Some(store) = self.store_for_writing(what, envelope, secrets).await else {
            return;
        };
        if let Err(e) = blocking(move || store.set_cooldown(&cooldown)).await {
            envelope
                .warnings
                .push(format!("cannot record the backend's cooldown: {e}"));
        }
    }
}

impl Admission {
    /// The store, opened now if admission did not need it (a SQLite store that did not exist
    /// yet), redacting the known values of `secrets` from all it writes; `None` without a
    /// store, or when it cannot be opened (then a warning saying `what` could not be done).
    async fn store_for_writing(
        &self,
        what: &str,
        envelope: &mut Envelope,
        secrets: &Secrets,
    ) -> Option<Arc<Store>> {
        let store = match (&self.store, &self.location) {
            (Some(store), _) => Ok(store.clone()),
            (None, Some(location)) => open(location.clone()).await,
            (None, None) => return None,
        };
        let values = secrets.clone();
        let redacting = match store {
            Ok(store) => blocking(move || store.redact_with(&values).map(|()| store)).await,
            Err(e) => Err(e),
        };
        redacting
            .map_err(|e| envelope.warnings.push(format!("{what}: {e}")))
            .ok()
    }

    /// The request shape the store remembers for this backend (DESIGN §12). A store that is
    /// not open, or fails, remembers nothing: the run starts in the full shape.
    pub async fn remembered_shape(&self) -> Option<RequestShape> {
        let store = self.store.clone()?;
        let backend = self.backend.clone();
        blocking(move || store.compat_shape(&backend))
            .await
            .ok()
            .flatten()
    }

    /// Remembers that this backend needs the compat request shape, so that later runs start
    /// in it; a store that cannot be written is a warning.
    pub async fn remember_compat_shape(
        &self,
        reason: &str,
        envelope: &mut Envelope,
        secrets: &Secrets,
    ) {
        let what = "cannot remember the backend's request shape";
        let Some(store) = self.store_for_writing(what, envelope, secrets).await else {
            return;
        };
        let (backend, reason) = (self.backend.clone(), reason.to_owned());
        if let Err(e) =
            blocking(move || store.set_compat_shape(&backend, RequestShape::Compat, Some(&reason)))
                .await
        {
            envelope
                .warnings
                .push(format!("cannot remember the backend's request shape: {e}"));
        }
    }
}

/// A SQLite store inside the workspace would let the agent rewrite what every later run
/// trusts (slots, cooldowns, the routing ledger): refused, like `--transcript` there.
fn refuse_inside_workspace(
    location: &Location,
    workspace: &std::path::Path,
) -> Result<(), Refusal> {
    let Location::Sqlite(path) = location else {
        return Ok(());
    };
    // The nearest existing ancestor, resolved (the file itself may not exist yet).
    let resolved = path
        .ancestors()
        .find_map(|a| a.canonicalize().ok().map(|c| (a, c)))
        .map(|(a, c)| c.join(path.strip_prefix(a).unwrap_or(std::path::Path::new(""))));
    let workspace = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_owned());
    // `root_holding` also finds the workspace under another path (a bind mount).
    if resolved.is_some_and(|p| p.starts_with(&workspace))
        || crate::sandbox::root_holding(path, std::slice::from_ref(&workspace)).is_some()
    {
        return Err(refuse(
            ErrorKind::ConfigError,
            format!(
                "the store {} lies inside the workspace, where the agent could rewrite it",
                path.display()
            ),
            Some(
                "put the store outside the workspace: --store, CODER_STORE or the config's \
                 `store` name it; the default, <state>/coder.db, moves with CODER_STATE_DIR"
                    .to_owned(),
            ),
        ));
    }
    Ok(())
}

/// A SQLite store in a grant the agent may write besides the workspace (a `--write` path,
/// `/tmp` with `--allow-tmp`) is refused as inside the workspace.
fn refuse_in_agent_grant(location: &Location, request: &RunRequest) -> Result<(), Refusal> {
    let Location::Sqlite(path) = location else {
        return Ok(());
    };
    let args = &request.sandbox_args;
    let roots = crate::sandbox::agent_write_roots(request.sandbox, args);
    match crate::sandbox::root_holding(path, &roots) {
        Some(root) => Err(refuse(
            ErrorKind::ConfigError,
            format!(
                "the store {} lies in {}, which the agent may write (--write, --allow-tmp or --tool-caches): \
                 it could rewrite the slots, cooldowns and routing ledger later runs trust",
                path.display(),
                root.display()
            ),
            Some("put the store elsewhere (the default is <state>/coder.db)".to_owned()),
        )),
        None => Ok(()),
    }
}

async fn open(location: Location) -> Result<Arc<Store>, StoreError> {
    blocking(move || Store::open(&location).map(Arc::new)).await
}

/// Runs a store call off the async threads (it blocks for a round trip).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or(Err(StoreError::Closed))
}

/// The command that ends `backend`'s cooldown in the store at `location`, to be pasted
/// as it is: with `--store` unless the store is the default one (a cooldown recorded in a
/// store the run named, by `--store` or the config file's `store`, was not found by a bare
/// `coder route forget NAME`, which said it forgot nothing).
fn forget_command(backend: &str, location: &Location, state_dir: &std::path::Path) -> String {
    let quoted = crate::text::shell_quote(backend);
    if *location == Location::Sqlite(state_dir.join("coder.db")) {
        return format!("`coder route forget {quoted}`");
    }
    let shown = location.display();
    let command = format!(
        "`coder route --store {} forget {quoted}`",
        crate::text::shell_quote(&shown)
    );
    match location {
        Location::Postgres(url) if *url != shown => {
            format!("{command} (with the store's password in place of ***)")
        }
        _ => command,
    }
}

async fn check_cooldown(store: &Arc<Store>, backend: &str, forget: &str) -> Result<(), Refusal> {
    let (s, b) = (store.clone(), backend.to_owned());
    // A store that fails now (it did open) must not stop the run: no cooldown is known.
    let Ok(Some(cooldown)) = blocking(move || s.cooldown(&b)).await else {
        return Ok(());
    };
    Err(cooling_refusal(&cooldown, forget))
}

fn cooling_refusal(c: &Cooldown, forget: &str) -> Refusal {
    let class = match c.class.as_str() {
        "rate_limited" => ProviderClass::RateLimited,
        _ => ProviderClass::QuotaExhausted,
    };
    let provider = match c.provider.as_str() {
        "anthropic" => Provider::Anthropic,
        "zai" => Provider::Zai,
        "deepseek" => Provider::Deepseek,
        "minimax" => Provider::Minimax,
        _ => Provider::Other,
    };
    let why = if class == ProviderClass::RateLimited {
        "it is rate limited"
    } else {
        "its usage quota is used up"
    };
    let message = format!(
        "backend '{}' is cooling down until {}: {why} ({}; recorded by {}); \
         coder did not start the CLI",
        c.backend,
        c.retry_at,
        crate::text::one_line(&c.message, 200),
        c.set_by,
    );
    Refusal::Fail(Box::new(Refused {
        kind: ErrorKind::UpstreamError,
        summary: message.clone(),
        message,
        hint: Some(format!(
            "wait until {}, or run on another backend (--backend NAME or --backend auto); \
             if the quota is back sooner (a plan changed), {forget} ends the cooldown",
            c.retry_at,
        )),
        provider_error: Some(ProviderError {
            class,
            provider,
            code: c.code.clone(),
            http_status: c.http_status,
            retryable: false,
            session_poisoned: false,
            retry_after_s: None,
            retry_at: Some(c.retry_at.clone()),
            action: ProviderAction::WaitForReset,
        }),
        queue_ms: None,
    }))
}

/// Waits for a slot; the wait shows as phase `queued` and ends at the deadline.
async fn take_slot(
    store: &Arc<Store>,
    (backend, holder): (&str, &str),
    max: u32,
    deadline: Option<Instant>,
    signals: &mut CancelSignals,
    journal: &mut dyn Journal,
) -> Result<(SlotGuard, u64), Refusal> {
    let started = Instant::now();
    let mut announced = false;
    loop {
        let (s, b, h) = (store.clone(), backend.to_owned(), holder.to_owned());
        match blocking(move || SlotGuard::try_acquire(&s, &b, max, &h)).await {
            Ok(Some(guard)) => {
                let queue_ms = started.elapsed().as_millis() as u64;
                if announced {
                    journal.note(Note::Queued(json!({
                        "backend": backend,
                        "state": "admitted",
                        "slot": guard.slot(),
                        "queue_ms": queue_ms,
                    })));
                }
                return Ok((guard, queue_ms));
            }
            Ok(None) => {}
            Err(e) => {
                return Err(refuse(
                    ErrorKind::ConfigError,
                    format!("cannot take a slot on backend '{}': {e}", backend),
                    None,
                ));
            }
        }
        if !announced {
            announced = true;
            let (s, b) = (store.clone(), backend.to_owned());
            let holders = blocking(move || s.slot_holders(&b))
                .await
                .unwrap_or_default();
            journal.note(Note::Queued(json!({
                "backend": backend,
                "state": "waiting",
                "max_concurrent": max,
                "held_by": holders.iter().map(|h| json!({
                    "host": h.host, "pid": h.pid, "slot": h.slot,
                })).collect::<Vec<_>>(),
            })));
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            let mut refusal = refuse(
                ErrorKind::Timeout,
                format!(
                    "--max-duration reached after {:.1} s queued for a slot on backend '{}' \
                     (max_concurrent {max}, all taken); the CLI never started",
                    started.elapsed().as_secs_f64(),
                    backend
                ),
                Some("raise max_concurrent for this backend, or --max-duration".to_owned()),
            );
            // The whole run was the wait: `metrics.queue_ms` says so, as for an admitted run.
            if let Refusal::Fail(refused) = &mut refusal {
                refused.queue_ms = Some(started.elapsed().as_millis() as u64);
            }
            return Err(refusal);
        }
        let nap = deadline.map_or(QUEUE_POLL, |d| QUEUE_POLL.min(d - now)) + jitter();
        tokio::select! {
            biased;
            signo = signals.recv() => {
                return Err(Refusal::Cancelled(signo, started.elapsed().as_millis() as u64));
            }
            _ = tokio::time::sleep(nap) => {}
        }
    }
}

/// Up to 100 ms, so queued coders do not poll in lockstep.
fn jitter() -> Duration {
    Duration::from_millis(u64::from(uuid::Uuid::new_v4().as_bytes()[0]) * 100 / 255)
}

/// `host:pid:random`: unique per run, and says where a slot's holder runs.
fn holder_id() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default();
    let tag = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}:{}:{}", std::process::id(), &tag[..8])
}

/// The cooldown a failed run calls for: a used-up quota with its reset time, or a rate
/// limit with the vendor's delay. `None` for anything else, or a time already past.
fn cooldown_from(envelope: &Envelope, backend: &str, holder: &str) -> Option<Cooldown> {
    if envelope.success {
        return None;
    }
    let detail = envelope.error_detail.as_ref()?;
    let error = detail.provider_error.as_ref()?;
    let now = store::now_ms();
    let until_ms = match error.class {
        ProviderClass::QuotaExhausted => store::parse_utc(error.retry_at.as_deref()?)?,
        ProviderClass::RateLimited => now + (error.retry_after_s? * 1000.0) as i64,
        _ => return None,
    };
    if until_ms <= now {
        return None;
    }
    Some(Cooldown {
        backend: backend.to_owned(),
        until_ms,
        retry_at: store::format_utc(until_ms),
        class: provider::class_name(error.class),
        provider: serde_json::to_value(error.provider)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        code: error.code.clone(),
        http_status: error.http_status,
        message: envelope.error.clone().unwrap_or_default(),
        set_by: holder.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forget_command_names_any_store_but_the_default_and_never_its_password() {
        let state = std::path::Path::new("/s");
        let at = |l: Location| forget_command("glm", &l, state);
        assert_eq!(
            at(Location::Sqlite(state.join("coder.db"))),
            "`coder route forget glm`"
        );
        assert_eq!(
            at(Location::Sqlite("/shared/c.db".into())),
            "`coder route --store /shared/c.db forget glm`"
        );
        assert_eq!(
            at(Location::Postgres("postgres://u:pw@db/c".into())),
            "`coder route --store 'postgres://u:***@db/c' forget glm` (with the store's \
             password in place of ***)"
        );
        assert_eq!(
            at(Location::Postgres("postgres://u@db/c".into())),
            "`coder route --store postgres://u@db/c forget glm`"
        );
    }
}
