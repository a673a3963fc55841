//! Backend profiles as layers of optional settings, and the built-in presets.
//!
//! A [`Profile`] is one layer: every setting is optional, and [`Profile::overlay`] lets a
//! higher layer (config file, then environment, then flags) replace what a lower one said.
//! The presets carry each vendor's documented Anthropic-compatible endpoint and the settings
//! its Claude Code guide recommends, plus the cheap workarounds from measurements: every
//! model slot mapped (an unmapped Haiku slot sends a `claude-haiku-*` id the vendor rejects),
//! experimental betas off (tool search blocks no vendor supports), WebSearch disallowed
//! (no vendor runs Anthropic's server-side search tool).

use std::collections::BTreeMap;
use std::path::PathBuf;

/// What a backend is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// An Anthropic-compatible HTTP API with a base URL and a key.
    Api,
    /// The caller's own Claude settings (`ANTHROPIC_*`, `CLAUDE_*`, login) used as they are.
    Inherit,
    /// A local replay server coder starts for a recorded cassette.
    Replay,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Api => "api",
            BackendKind::Inherit => "inherit",
            BackendKind::Replay => "replay",
        }
    }
}

/// How the key reaches the API: which variable the CLI reads it from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthScheme {
    /// `ANTHROPIC_AUTH_TOKEN`, sent as `Authorization: Bearer`. What the vendors document.
    Bearer,
    /// `ANTHROPIC_API_KEY`, sent as `x-api-key`. What api.anthropic.com expects.
    ApiKey,
}

impl AuthScheme {
    /// The variable the CLI reads the key from.
    pub fn variable(self) -> &'static str {
        match self {
            AuthScheme::Bearer => "ANTHROPIC_AUTH_TOKEN",
            AuthScheme::ApiKey => "ANTHROPIC_API_KEY",
        }
    }
}

/// The CLI's own API retry count unless a profile says otherwise. The CLI's default (10,
/// with backoff up to 40 s, and up to an hour on a hung backend) would eat coder's time
/// budget; coder owns the retry policy.
pub const DEFAULT_CLI_MAX_RETRIES: u32 = 3;

/// One layer of backend settings. `None` means "this layer says nothing"; an empty string
/// in a model or env value means "leave the variable unset" (to clear a preset's value).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Profile {
    pub description: Option<String>,
    pub kind: Option<BackendKind>,
    pub base_url: Option<String>,
    /// Name of the variable in coder's environment that holds the key.
    pub key_env: Option<String>,
    /// The key itself, written into the config file by a user who insists.
    pub api_key: Option<String>,
    pub auth: Option<AuthScheme>,
    /// `ANTHROPIC_MODEL`.
    pub model: Option<String>,
    /// `ANTHROPIC_SMALL_FAST_MODEL` (legacy name the CLI still reads).
    pub small_fast_model: Option<String>,
    /// `ANTHROPIC_DEFAULT_OPUS_MODEL`.
    pub opus_model: Option<String>,
    /// `ANTHROPIC_DEFAULT_SONNET_MODEL`.
    pub sonnet_model: Option<String>,
    /// `ANTHROPIC_DEFAULT_HAIKU_MODEL`.
    pub haiku_model: Option<String>,
    /// `CLAUDE_CODE_SUBAGENT_MODEL`.
    pub subagent_model: Option<String>,
    /// `API_TIMEOUT_MS`: how long the CLI waits for response headers.
    pub api_timeout_ms: Option<u64>,
    /// `CLAUDE_CODE_MAX_RETRIES`: the CLI's own API retries.
    pub max_retries: Option<u32>,
    /// Tools the CLI should not offer the model on this backend.
    pub disallowed_tools: Option<Vec<String>>,
    /// Text for the CLI's `--append-system-prompt`.
    pub append_system_prompt: Option<String>,
    /// The recorded exchange a replay backend serves.
    pub cassette: Option<PathBuf>,
    /// Further variables for the child; merged key by key across layers.
    pub env: BTreeMap<String, String>,
    /// Names (or `PREFIX*` patterns) of caller variables to pass through; added up across layers.
    pub pass_env: Vec<String>,
    /// How many runs may use this backend at once, across every coder sharing the store
    /// (DESIGN §10 slots); `None`: no limit.
    pub max_concurrent: Option<u32>,
    /// How long the CLI may stay silent while one of its requests is in flight, when that is
    /// longer than `--timeout` (DeepSeek queues requests and holds them open with keep-alive
    /// comments the CLI does not print; `provider-quirks.md` §5b row 17). `--max-duration`
    /// still applies.
    pub provider_wait_s: Option<u64>,
    /// Who serves the API, for a base URL that does not say (a proxy, a gateway): decides
    /// how its errors are read and which of its quirks coder works around.
    pub provider: Option<Provider>,
}

impl Profile {
    /// Applies `top` over `self`: every setting `top` has replaces this one's; `env` merges
    /// key by key and `pass_env` accumulates.
    pub fn overlay(&mut self, top: Profile) {
        fn set<T>(slot: &mut Option<T>, value: Option<T>) {
            if value.is_some() {
                *slot = value;
            }
        }
        set(&mut self.description, top.description);
        set(&mut self.kind, top.kind);
        set(&mut self.base_url, top.base_url);
        set(&mut self.key_env, top.key_env);
        set(&mut self.api_key, top.api_key);
        set(&mut self.auth, top.auth);
        set(&mut self.model, top.model);
        set(&mut self.small_fast_model, top.small_fast_model);
        set(&mut self.opus_model, top.opus_model);
        set(&mut self.sonnet_model, top.sonnet_model);
        set(&mut self.haiku_model, top.haiku_model);
        set(&mut self.subagent_model, top.subagent_model);
        set(&mut self.api_timeout_ms, top.api_timeout_ms);
        set(&mut self.max_retries, top.max_retries);
        set(&mut self.disallowed_tools, top.disallowed_tools);
        set(&mut self.append_system_prompt, top.append_system_prompt);
        set(&mut self.cassette, top.cassette);
        set(&mut self.max_concurrent, top.max_concurrent);
        set(&mut self.provider_wait_s, top.provider_wait_s);
        set(&mut self.provider, top.provider);
        self.env.extend(top.env);
        self.pass_env.extend(top.pass_env);
    }
}

/// Who serves the API, as far as coder can tell (base URL first, then the error's shape).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    Anthropic,
    Zai,
    Deepseek,
    Minimax,
    /// A proxy, a replay server, or a vendor coder does not know.
    Other,
}

impl Provider {
    /// The provider behind a base URL; `None` (the CLI's default) is Anthropic.
    pub fn from_base_url(base_url: Option<&str>) -> Provider {
        let Some(url) = base_url else {
            return Provider::Anthropic;
        };
        let host = url
            .split("://")
            .nth(1)
            .unwrap_or(url)
            .split(['/', ':', '?'])
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        let under = |domain: &str| host == domain || host.ends_with(&format!(".{domain}"));
        if under("anthropic.com") {
            Provider::Anthropic
        } else if under("z.ai") || under("bigmodel.cn") {
            Provider::Zai
        } else if under("deepseek.com") {
            Provider::Deepseek
        } else if under("minimax.io") || under("minimaxi.com") {
            Provider::Minimax
        } else {
            Provider::Other
        }
    }

    /// The name the envelope and the config file use.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Anthropic => "anthropic",
            Provider::Zai => "zai",
            Provider::Deepseek => "deepseek",
            Provider::Minimax => "minimax",
            Provider::Other => "other",
        }
    }

    /// Whether the CLI's `total_cost_usd` means anything (it prices Anthropic's models).
    pub fn reports_real_cost(self) -> bool {
        self == Provider::Anthropic
    }

    /// The hours east of UTC a vendor writes its reset times in (Beijing/Shanghai time).
    pub fn local_offset_hours(self) -> i64 {
        match self {
            Provider::Anthropic => 0,
            _ => 8,
        }
    }
}

/// DeepSeek's queue holds a request open for up to 10 minutes before it answers or gives up.
pub const DEEPSEEK_PROVIDER_WAIT_S: u64 = 600;

/// Names of the built-in presets, sorted.
pub const BUILTIN_NAMES: [&str; 7] = [
    "anthropic",
    "deepseek",
    "glm",
    "glm-cn",
    "inherit",
    "minimax",
    "minimax-cn",
];

fn s(v: &str) -> Option<String> {
    Some(v.to_owned())
}

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Settings shared by the third-party vendors: Bearer auth, tool search off (the
/// `tool_reference` blocks it sends are in no vendor's supported list), and no WebSearch
/// (a server-side tool that GLM answers with 422, DeepSeek with 400 in thinking mode and
/// MiniMax with empty results).
fn vendor(description: &str, base_url: &str, key_env: &str) -> Profile {
    Profile {
        description: s(description),
        kind: Some(BackendKind::Api),
        base_url: s(base_url),
        key_env: s(key_env),
        auth: Some(AuthScheme::Bearer),
        disallowed_tools: Some(vec!["WebSearch".to_owned()]),
        env: env(&[("CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS", "1")]),
        ..Profile::default()
    }
}

/// Appended to the CLI's system prompt on GLM. Any `--append-system-prompt` makes the CLI
/// (2.1.330, measured) introduce itself as "Claude Code" instead of the "Claude Agent SDK"
/// sentence it sends in `-p` mode, and Z.ai's gateway sheds requests carrying the latter
/// under load with a misleading `529 [1305] overloaded`.
pub const GLM_SYSTEM_PROMPT_APPENDIX: &str = "You run non-interactively: nobody can answer questions during the run, and your final message is returned to the caller as the result.";

/// GLM through Z.ai's or Zhipu's Anthropic-compatible endpoint: GLM-4.7 in the main, Opus,
/// Sonnet and subagent slots, GLM-4.5-Air in the Haiku and small/fast slots, the
/// 50-minute header timeout of the vendor's guide, and the identity fix above.
fn glm(description: &str, base_url: &str, key_env: &str) -> Profile {
    Profile {
        append_system_prompt: s(GLM_SYSTEM_PROMPT_APPENDIX),
        model: s("glm-4.7"),
        small_fast_model: s("glm-4.5-air"),
        opus_model: s("glm-4.7"),
        sonnet_model: s("glm-4.7"),
        haiku_model: s("glm-4.5-air"),
        subagent_model: s("glm-4.7"),
        api_timeout_ms: Some(3_000_000),
        // GLM Coding Plan concurrency is reported as 1 request in flight per key.
        max_concurrent: Some(1),
        ..vendor(description, base_url, key_env)
    }
}

/// MiniMax: one model in every slot, as the vendor's guide says; a 50-minute header timeout.
fn minimax(description: &str, base_url: &str) -> Profile {
    Profile {
        model: s("MiniMax-M2.7"),
        small_fast_model: s("MiniMax-M2.7"),
        opus_model: s("MiniMax-M2.7"),
        sonnet_model: s("MiniMax-M2.7"),
        haiku_model: s("MiniMax-M2.7"),
        subagent_model: s("MiniMax-M2.7"),
        api_timeout_ms: Some(3_000_000),
        ..vendor(description, base_url, "MINIMAX_API_KEY")
    }
}

/// The built-in preset of this name.
pub fn builtin(name: &str) -> Option<Profile> {
    let profile = match name {
        "glm" => glm(
            "GLM via Z.ai (international)",
            "https://api.z.ai/api/anthropic",
            "ZAI_API_KEY",
        ),
        "glm-cn" => glm(
            "GLM via Zhipu open.bigmodel.cn (China)",
            "https://open.bigmodel.cn/api/anthropic",
            "ZHIPUAI_API_KEY",
        ),
        "deepseek" => {
            let mut p = Profile {
                model: s("deepseek-v4-pro[1m]"),
                small_fast_model: s("deepseek-v4-flash"),
                opus_model: s("deepseek-v4-pro[1m]"),
                sonnet_model: s("deepseek-v4-pro[1m]"),
                haiku_model: s("deepseek-v4-flash"),
                subagent_model: s("deepseek-v4-flash"),
                api_timeout_ms: Some(600_000),
                provider_wait_s: Some(DEEPSEEK_PROVIDER_WAIT_S),
                ..vendor(
                    "DeepSeek",
                    "https://api.deepseek.com/anthropic",
                    "DEEPSEEK_API_KEY",
                )
            };
            p.env.extend(env(&[
                ("CLAUDE_CODE_AUTO_COMPACT_WINDOW", "786432"),
                ("CLAUDE_CODE_EFFORT_LEVEL", "max"),
            ]));
            p
        }
        "minimax" => minimax(
            "MiniMax (international)",
            "https://api.minimax.io/anthropic",
        ),
        "minimax-cn" => minimax("MiniMax (China)", "https://api.minimaxi.com/anthropic"),
        "anthropic" => Profile {
            description: s("Anthropic API"),
            kind: Some(BackendKind::Api),
            base_url: s("https://api.anthropic.com"),
            key_env: s("ANTHROPIC_API_KEY"),
            auth: Some(AuthScheme::ApiKey),
            ..Profile::default()
        },
        "inherit" => Profile {
            description: s("the caller's own Claude settings, as they are"),
            kind: Some(BackendKind::Inherit),
            ..Profile::default()
        },
        _ => return None,
    };
    Some(profile)
}

/// A change coder made to the CLI's defaults for a backend, as `applied_workarounds` in the
/// envelope names it (DESIGN §12): each one answers a known provider failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Workaround {
    /// Every model slot set, so no `claude-haiku-*` id reaches a vendor that rejects it.
    ModelSlotsMapped,
    /// `CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS=1`: tools inline, no tool search blocks.
    ExperimentalBetasOff,
    /// WebSearch disallowed (no vendor runs Anthropic's server-side search tool).
    WebSearchDisallowed,
    /// `--append-system-prompt`, which makes the CLI send the "Claude Code" identity
    /// sentence that Z.ai does not shed under load.
    IdentitySentence,
    /// `CLAUDE_CODE_MAX_RETRIES` lowered: coder owns the retry policy.
    CliRetriesCapped,
    /// The caller's `ANTHROPIC_API_KEY` removed, so it cannot win over the backend's key.
    CallerApiKeyDropped,
    /// The compat request shape (`--bare`, experimental betas off): the backend rejected the
    /// full shape's `role:"system"` message, in this run or an earlier one (the store
    /// remembers it).
    CompatShape,
    /// Extended thinking turned off after a thinking-schema or reasoning round-trip error.
    ThinkingOff,
    /// Subagents disallowed after DeepSeek's effort conflict.
    SubagentsDisallowed,
    /// WebSearch and WebFetch disallowed after the vendor rejected a web tool.
    WebToolsDisallowed,
}

impl Workaround {
    /// The name `applied_workarounds` uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Workaround::ModelSlotsMapped => "model_slots_mapped",
            Workaround::ExperimentalBetasOff => "experimental_betas_off",
            Workaround::WebSearchDisallowed => "web_search_disallowed",
            Workaround::IdentitySentence => "identity_sentence",
            Workaround::CliRetriesCapped => "cli_retries_capped",
            Workaround::CallerApiKeyDropped => "caller_api_key_dropped",
            Workaround::CompatShape => "compat_shape",
            Workaround::ThinkingOff => "thinking_off",
            Workaround::SubagentsDisallowed => "subagents_disallowed",
            Workaround::WebToolsDisallowed => "web_tools_disallowed",
        }
    }
}

/// The workarounds a resolved backend's settings amount to.
pub fn workarounds_in(
    settings: &[(String, String)],
    disallowed_tools: &[String],
    appends_system_prompt: bool,
    drops_caller_api_key: bool,
) -> Vec<Workaround> {
    let set = |name: &str| settings.iter().any(|(k, v)| k == name && !v.is_empty());
    let mut found = Vec::new();
    if set("ANTHROPIC_DEFAULT_HAIKU_MODEL") {
        found.push(Workaround::ModelSlotsMapped);
    }
    if settings
        .iter()
        .any(|(k, v)| k == "CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS" && v == "1")
    {
        found.push(Workaround::ExperimentalBetasOff);
    }
    if disallowed_tools.iter().any(|t| t == "WebSearch") {
        found.push(Workaround::WebSearchDisallowed);
    }
    if appends_system_prompt {
        found.push(Workaround::IdentitySentence);
    }
    if set("CLAUDE_CODE_MAX_RETRIES") {
        found.push(Workaround::CliRetriesCapped);
    }
    if drops_caller_api_key {
        found.push(Workaround::CallerApiKeyDropped);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_serialized_names() {
        let workarounds = [
            Workaround::ModelSlotsMapped,
            Workaround::ExperimentalBetasOff,
            Workaround::WebSearchDisallowed,
            Workaround::IdentitySentence,
            Workaround::CliRetriesCapped,
            Workaround::CallerApiKeyDropped,
            Workaround::CompatShape,
            Workaround::ThinkingOff,
            Workaround::SubagentsDisallowed,
            Workaround::WebToolsDisallowed,
        ];
        for w in workarounds {
            assert_eq!(serde_json::to_value(w).unwrap(), w.as_str());
        }
        for p in [
            Provider::Anthropic,
            Provider::Zai,
            Provider::Deepseek,
            Provider::Minimax,
            Provider::Other,
        ] {
            assert_eq!(serde_json::to_value(p).unwrap(), p.as_str());
        }
    }

    #[test]
    fn every_listed_name_has_a_preset() {
        for name in BUILTIN_NAMES {
            assert!(builtin(name).is_some(), "{name}");
        }
        assert!(builtin("nope").is_none());
        let mut sorted = BUILTIN_NAMES;
        sorted.sort_unstable();
        assert_eq!(sorted, BUILTIN_NAMES);
    }

    #[test]
    fn overlay_replaces_set_values_and_merges_env() {
        let mut base = builtin("glm").unwrap();
        let top = Profile {
            model: s("glm-5.2"),
            env: env(&[("EXTRA", "1")]),
            pass_env: vec!["CARGO_HOME".into()],
            ..Profile::default()
        };
        base.overlay(top);
        assert_eq!(base.model.as_deref(), Some("glm-5.2"));
        assert_eq!(base.haiku_model.as_deref(), Some("glm-4.5-air"));
        assert_eq!(base.env.get("EXTRA").map(String::as_str), Some("1"));
        assert!(
            base.env
                .contains_key("CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS")
        );
        assert_eq!(base.pass_env, ["CARGO_HOME"]);
    }
}
