//! Which environment variables hold credentials: one rule, used both to withhold them from
//! a command coder confines (`coder sandbox`) and to collect the values coder must never
//! print (the child's environment, coder's own).
//!
//! The rule is the union of the two that existed before (a name containing `TOKEN`, `KEY`,
//! `SECRET`, `PASSWORD`, `PASSWD` or `CREDENTIAL`, or starting with `AWS_`): a name that
//! either said was a credential still is one. Matching is case-insensitive, so `db_password`
//! counts. A value is redacted only when it is long enough to be a credential and not a
//! plain word (see [`crate::text::redact::Secrets`]), so a broad name rule (`AWS_PROFILE`)
//! does not turn every `default` in a transcript into `[REDACTED]`.

use std::ffi::OsStr;

/// Parts of a variable name that mark it as holding a credential (`API_KEY`, `ACCESS_KEY`,
/// `PRIVATE_KEY` and `APIKEY` are covered by `KEY`).
const SECRET_PARTS: [&str; 6] = ["TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL"];

/// Name prefixes of whole families of credentials and their settings.
const SECRET_PREFIXES: [&str; 1] = ["AWS_"];

/// Whether an environment variable's name says it holds a credential.
pub fn is_secret_name(name: &OsStr) -> bool {
    let upper = name.to_string_lossy().to_ascii_uppercase();
    SECRET_PARTS.iter().any(|part| upper.contains(part))
        || SECRET_PREFIXES
            .iter()
            .any(|prefix| upper.starts_with(prefix))
}

/// The values of the variables in `env` whose names say they hold credentials.
pub fn secret_values<K: AsRef<OsStr>, V: AsRef<OsStr>>(env: &[(K, V)]) -> Vec<String> {
    env.iter()
        .filter(|(k, _)| is_secret_name(k.as_ref()))
        .filter_map(|(_, v)| v.as_ref().to_str().map(str::to_owned))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_union_of_both_former_rules() {
        for name in [
            // Both rules.
            "GITHUB_TOKEN",
            "ANTHROPIC_AUTH_TOKEN",
            "OPENAI_API_KEY",
            "db_password",
            "CLIENT_SECRET",
            // Only the former child rule (any KEY).
            "ZAI_KEY",
            "SIGNING_KEY",
            // Only the former sandbox rule.
            "MYSQL_PASSWD",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "AWS_PROFILE",
            "aws_session_token",
        ] {
            assert!(is_secret_name(OsStr::new(name)), "{name}");
        }
        for name in [
            "PATH",
            "HOME",
            "CARGO_HOME",
            "TERM",
            "LANG",
            "ANTHROPIC_MODEL",
        ] {
            assert!(!is_secret_name(OsStr::new(name)), "{name}");
        }
    }

    #[test]
    fn values_of_secret_names_only() {
        let env = [
            ("PATH", "/bin"),
            ("MY_TOKEN", "t0ken-value"),
            ("KEYRING", "x"),
        ];
        assert_eq!(secret_values(&env), vec!["t0ken-value", "x"]);
    }
}
