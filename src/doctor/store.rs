//! The store check: whether the store a run would use (`--store`, `CODER_STORE`, the
//! config file's `store`, else `<state>/coder.db`) can be opened. A run fails with
//! `config_error` when it cannot (unless `--store-optional`), so the doctor fails too; it
//! said `ok` with the reason in the `compat` line's parentheses.

use std::ffi::OsString;

use crate::config::{self, BackendArgs};
use crate::store::{Location, Store, StoreArgs};

use super::{Check, Status};

/// The store a run with these arguments would use.
pub(super) fn store_location(
    store: &StoreArgs,
    args: &BackendArgs,
    env: &[(OsString, OsString)],
) -> Result<Location, String> {
    let state_dir = config::state_dir_of(env).ok_or("no state directory")?;
    let (url, file) = config::store_setting(args, env).map_err(|e| e.to_string())?;
    Location::resolve(store, url.as_deref(), file.as_deref(), &state_dir).map_err(|e| e.to_string())
}

/// Whether that store opens; skipped when the config file is unusable (its own check
/// says why).
pub(super) fn check_store(
    store: &StoreArgs,
    args: &BackendArgs,
    env: &[(OsString, OsString)],
    config_usable: bool,
) -> Check {
    if !config_usable {
        return Check::new("store", Status::Skip, "the config file is unusable");
    }
    let opened = store_location(store, args, env).and_then(|location| {
        if !location.may_hold_state() {
            return Ok(format!(
                "{} (not made yet: the first run that needs it makes it)",
                location.display()
            ));
        }
        Store::open(&location)
            .map(|_| location.display())
            .map_err(|e| e.to_string())
    });
    match opened {
        Ok(summary) => Check::new("store", Status::Ok, summary),
        Err(why) if store.optional => Check::new("store", Status::Warn, why).hint(
            "runs go on without slots, cooldowns and routing (--store-optional, \
             CODER_STORE_OPTIONAL)",
        ),
        Err(why) => Check::new("store", Status::Fail, why).hint(
            "a run fails with config_error: fix --store, CODER_STORE or the config file's \
             store, or pass --store-optional to run without slots, cooldowns and routing",
        ),
    }
}
