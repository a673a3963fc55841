//! Keeping credentials out of everything coder prints or stores: the envelope, the
//! transcript, `--log-metrics`, `coder runs show`.
//!
//! Two kinds of secrets are replaced by [`REDACTED`]:
//!
//! - **Known values** ([`Secrets`]): the backend key and the credentials in the child's and
//!   coder's environment. They are matched in every spelling a JSON text can give them —
//!   literal, or any of their characters written as a JSON escape (`\u0073k-…`, `\/`, `\"`)
//!   — because the child's output is JSON and a decoded string is what a reader sees. The
//!   match runs on the raw text, so it also works on a line cut in the middle (which no
//!   longer parses) and a JSON line keeps its exact bytes where no secret is.
//! - **Token shapes**: credentials coder does not know (one the agent read from a file) in
//!   well-known formats (`sk-…`, `ghp_…`, `github_pat_…`, `xoxb-…`, `glpat-…`, `AIza…`,
//!   `AKIA…`, a JSON Web Token's `eyJ…`, a Z.ai key's `<32 hex>.<16 letters and digits>`,
//!   `Bearer …` in any case and an `Authorization` or `x-api-key` header's value (its name
//!   in any case), the token also on the next line), only when the token is long and, after a prefix prose uses too, looks
//!   random (a digit, or base64's case changes), so ordinary words such as
//!   `sk-learn-compatible` or `Bearer authentication` stay. They too are matched in every
//!   JSON spelling (`\u0073k-…`, `Bearer\u0020…`, `Bearer\t…`, `\/` in a token, a token
//!   right after `\n`), read as JSON decodes it with the known values' escape reader.
//!   Lines kept one by one carry a `Bearer` at a line's end over to the next
//!   ([`awaits_token`], [`redact_continued`]).
//!
//! **Cuts.** Redaction runs before a text is cut. Where the source itself was cut at a byte
//! cap before coder could see all of it ([`Ending::Cut`]), and wherever a text carries the
//! `…` that [`crate::text::one_line`] leaves at a cut, a *partial* match is dropped too: a
//! piece of text ending at the cut that is the first [`MIN_PARTIAL`] or more bytes of a
//! known secret (in any spelling), or a token shape's prefix followed by [`MIN_PARTIAL`] or
//! more of its characters up to the cut ([`Secrets::redact_ending`],
//! [`redact_cut_tokens_bytes`]). So a cut never leaves more than three bytes of a key.
//!
//! **Cost.** The transcript redacts every line of the child's output on its hot path. One
//! packed search for everything a redaction starts at (`Bearer` and the header names, in
//! any case, by three rare bytes of each in every case, [`tokens::CASELESS_WORDS`]) clears most
//! entries ([`Secrets::surely_clean`]). Otherwise a text
//! without a backslash-escape that could spell a secret costs one `memmem` search per
//! secret; only a text holding one (`\u…`, or an escape of a character a secret holds) is
//! scanned escape by escape. Token shapes cost one packed search, one `memmem` for
//! `\u00` and a sampled pass for Z.ai keys (one 8-byte block every 24 bytes, `glm_keys`);
//! a text is read as JSON decodes it only around each prefix found, or position by
//! position where it holds a `\u` escape of printable ASCII (which could spell a prefix;
//! JSON writers do not make them).

mod known;
mod spelling;
mod tokens;

pub use known::Secrets;
pub use tokens::{
    awaits_token, redact_continued, redact_cut_tokens_bytes, redact_tokens, redact_tokens_bytes,
    url_without_password,
};

/// What a secret is replaced with.
pub const REDACTED: &str = "[REDACTED]";

/// Shorter known values are not redacted: they would match ordinary text.
pub const MIN_SECRET_LEN: usize = 6;

/// A piece of a known secret this long (in bytes of the secret) at a cut is dropped.
pub const MIN_PARTIAL: usize = 4;

/// Whether a text is all there was, or the head of something longer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The whole text.
    Whole,
    /// Cut at its end (a byte cap): a secret may straddle the cut.
    Cut,
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::known::*;
    use super::tokens::*;
    use super::*;

    const KEY: &str = "zk-Tq81Lm9Xv2Pw7Rb4Hc6N";

    fn secrets() -> Secrets {
        Secrets::new([KEY, "hunter2hunter2", "ab", "default", "production"])
    }

    #[test]
    fn token_redaction_on_bytes_matches_the_str_version() {
        let texts = [
            "key é sk-ant0123456789abcdefXYZ end",
            "Bearer abcdef0123456789abcdef, ésk-ant0123456789abcdefXYZ",
            "xsk-ant0123456789abcdefXYZ and sk-learn-compatible-models",
        ];
        for text in texts {
            assert_eq!(
                redact_tokens_bytes(text.as_bytes()).as_ref(),
                redact_tokens(text).as_bytes()
            );
        }
        // Not UTF-8: still redacted (the transcript's entries are not validated first).
        let raw = b"\xff\xfe ghp_0123456789abcdefABCDEF \xff".to_vec();
        let mut raw = raw;
        raw[0] = 0xff;
        let out = redact_tokens_bytes(&raw);
        assert!(
            out.windows(REDACTED.len())
                .any(|w| w == REDACTED.as_bytes())
        );
    }

    #[test]
    fn a_text_is_called_clean_only_when_redaction_leaves_it_alone() {
        let slashed = Secrets::new([KEY, "pa/ss\"wo9rd"]);
        let needing = [
            format!("key={KEY} ok"),
            format!("key=\\u007a{} ok", &KEY[1..]),
            KEY.replace('-', "\\u002d"),
            r#"{"a":"pa\/ss\"wo9rd"}"#.to_owned(),
            format!("failed: {}… (exit 1)", &KEY[..12]),
            "auth: Bearer abc123def456ghi789".to_owned(),
            "sk-ant-api03-AAAA1111BBBB2222".to_owned(),
            "x ghp_0123456789abcdefABCDEF".to_owned(),
            "AKIA0123456789ABCDEF".to_owned(),
        ];
        let tokens = [
            r"\u0073k-ant-api03-AAAA1111BBBB2222",
            r"auth: Bearer\tabc123def456ghi789",
            r"auth: \u0042earer abc123def456ghi789",
            r"x\nghp_0123456789abcdefABCDEF",
            "x-api-key: Zk4Wq8Xr2Ty6Up0Io",
            r#"{"X-Api-Key":"Zk4Wq8Xr2Ty6Up0Io"}"#,
            r"\u0078-api-key: Zk4Wq8Xr2Ty6Up0Io",
        ];
        for text in &needing {
            let changed = slashed
                .redact_known(text.as_bytes(), Ending::Whole)
                .is_some()
                || matches!(redact_tokens_bytes(text.as_bytes()), Cow::Owned(_));
            assert!(changed, "{text}");
            assert!(!slashed.surely_clean(text.as_bytes()), "{text}");
        }
        for text in tokens {
            assert!(matches!(
                redact_tokens_bytes(text.as_bytes()),
                Cow::Owned(_)
            ));
            for secrets in [&slashed, &Secrets::new(Vec::<String>::new())] {
                assert!(!secrets.surely_clean(text.as_bytes()), "{text}");
            }
        }
        // Plain text, and lines of JSON with ordinary escapes, take the one pass only.
        // (Where the CPU has a packed searcher; elsewhere nothing is called clean.)
        if !cfg!(target_arch = "x86_64") {
            return;
        }
        let clean = r#"{"type":"assistant","text":"line\none \"quoted\" café — ✓"}"#;
        assert!(secrets().surely_clean(clean.as_bytes()));
        assert!(Secrets::new(Vec::<String>::new()).surely_clean(b"no secrets known"));
        assert!(secrets().surely_clean(b""));
        // `\"` can spell a character of the second set's secret, but only followed by the
        // spelling of its next character (`w`, or an escape): `\"q` spells none of it.
        assert!(slashed.surely_clean(clean.as_bytes()));
        assert_eq!(slashed.redact_known(clean.as_bytes(), Ending::Whole), None);
        for spelled in [r#"x \"wo"#, r#"x \"\u0077o"#, r#"x \"\n"#] {
            assert!(!slashed.surely_clean(spelled.as_bytes()), "{spelled}");
        }
        // A `\u` escape of a character no secret holds spells none: clean. One of a
        // character a secret holds, in any case of its hex digits, is not.
        let checked = Secrets::new([KEY, "pass✓wörd𝄞42"]);
        let escaped = r#"{"text":"done \u2714 \u4e2d\n"}"#;
        assert!(secrets().surely_clean(escaped.as_bytes()));
        // Without known values, only `\u` escapes of printable ASCII (which can spell a
        // token shape) are not.
        let none = Secrets::new(Vec::<String>::new());
        assert!(none.surely_clean(br#"\u001b[0m \u4e2d\u00e9 \/ \t Bear"#.as_slice()));
        for spelled in [r"\u0073k-", r"B\u0065arer", r"\u007E", r"\u002D"] {
            assert!(!none.surely_clean(spelled.as_bytes()), "{spelled}");
        }
        for spelled in [
            "pass\\u2713wörd𝄞42",
            "pass✓w\\u00F6rd𝄞42",
            "pass✓wörd\\uD834\\uDD1E42",
            "pass✓wörd\\ud834\\udd1e42",
            "pass✓wörd\\uD834\\udD1e42",
        ] {
            assert!(
                checked
                    .redact_known(spelled.as_bytes(), Ending::Whole)
                    .is_some(),
                "{spelled}"
            );
            assert!(!checked.surely_clean(spelled.as_bytes()), "{spelled}");
        }
    }

    /// On random texts made of the pieces redaction acts on and of text that shares
    /// their first bytes, a text the pre-filter calls clean is one redaction leaves alone
    /// (helper `stream`'s test, with the shapes added since).
    #[test]
    fn what_surely_clean_clears_redaction_leaves_alone() {
        let pieces = [
            "Bearer ",
            "bearer\t",
            "be",
            "earer",
            "— ",
            "“x”",
            "…",
            "\\/",
            "\\\"",
            "\\n",
            "\\u0042",
            "\\u00e9",
            "\\u2014",
            "sk-",
            "ghp_",
            "eyJ",
            "AKIA",
            "BEARER ",
            "Authorization: Basic ",
            "authorization=",
            "glpat-",
            "AIza",
            "xoxa-",
            "5371d5ed2fa84618852eee0459455c57",
            ".dgquQksHDfyLekKX",
            "\\u002e",
            "pa/ss",
            "wo9rd",
            KEY,
            "zk-Tq81",
            "abcdef0123456789abcdef ",
            "/etc/x",
            " ",
            "word ",
            r#"pa\/ss\"wo9rd"#,
            r#"pa\/\u0073s\"wo9rd"#,
            r#"pa/ss\"\u0077o9rd"#,
            r"\/etc\/ssl\/certs\/x.crt",
            "tok3n-abc/",
            r"tok3n-abc\/",
            r"\/\",
            r"\/s",
            "x-api-key: ",
            "X-Api-Key=",
            "x-api-",
            "X-API-KEY: ",
            "BeArEr ",
            r"\u0078-api-key:",
            "api-key=",
            "X-Api-",
            "Key: ",
        ];
        let sets = [
            Secrets::new([KEY, "pa/ss\"wo9rd"]),
            Secrets::new(["tok3n-abc/", "/etc/ssl/certs/x.crt"]),
            Secrets::new(["/etc/ssl/certs/x.crt"]),
            secrets(),
            Secrets::new(Vec::<String>::new()),
        ];
        let mut rng = crate::stream::Xorshift(0x9e37_79b9_7f4a_7c15);
        let mut cleared = 0;
        for _ in 0..20_000 {
            let text: String = (0..1 + rng.below(8))
                .map(|_| pieces[rng.below(pieces.len())])
                .collect();
            for set in &sets {
                if set.surely_clean(text.as_bytes()) {
                    cleared += 1;
                    assert_eq!(
                        set.redact_known(text.as_bytes(), Ending::Whole),
                        None,
                        "{text}"
                    );
                    assert!(
                        matches!(redact_tokens_bytes(text.as_bytes()), Cow::Borrowed(_)),
                        "{text}"
                    );
                    assert_eq!(set.redact(&text), text, "{text}");
                }
            }
        }
        if cfg!(target_arch = "x86_64") {
            assert!(cleared > 1_000, "{cleared}");
        }
        // Text that shares only the first bytes of a pattern is cleared, with a secret
        // that needs `\/` (the packed searcher tells candidates by three bytes); the
        // escape before the spelling of the secret's next character is not, nor one that
        // ends a secret, nor any case of `Bearer`.
        let slashed = Secrets::new(["/etc/ssl/certs/x.crt"]);
        if cfg!(target_arch = "x86_64") {
            assert!(slashed.surely_clean("to be — “seen” /etc, bears".as_bytes()));
            assert!(slashed.surely_clean(br"to be \/q"));
        }
        assert!(!slashed.surely_clean(br"to be \/etc"));
        assert!(!slashed.surely_clean(br"to be \/etc"));
        assert!(!Secrets::new(["tok3n-abc/"]).surely_clean(br"tok3n-abc\/"));
        for text in ["a Bearer b", "a bearer b", "a BEARER b", r"a Bearer b"] {
            assert!(!slashed.surely_clean(text.as_bytes()), "{text}");
        }
    }

    #[test]
    fn only_credential_like_values_are_kept() {
        assert_eq!(secrets().values(), [KEY, "hunter2hunter2"]);
        assert!(Secrets::new(["0123456789abcdef0123"]).values().len() == 1);
        assert_eq!(
            Secrets::new(["hunter2hunter2\n"]).values(),
            ["hunter2hunter2"]
        );
    }

    #[test]
    fn known_values_in_every_json_spelling() {
        let s = secrets();
        let spellings = [
            KEY.to_owned(),
            format!("\\u007a{}", &KEY[1..]),
            format!("\\u007A\\u006B{}", &KEY[2..]),
            KEY.replace('-', "\\u002d"),
            KEY.chars()
                .map(|c| format!("\\u{:04x}", c as u32))
                .collect(),
        ];
        for spelled in spellings {
            let line = format!(r#"{{"text":"key={spelled} ok"}}"#);
            let out = s.redact(&line);
            assert_eq!(out, r#"{"text":"key=[REDACTED] ok"}"#, "{spelled}");
        }
        // Escapes of characters the secret holds besides `\u`.
        let s = Secrets::new(["pa/ss\"wo9rd"]);
        assert_eq!(
            s.redact(r#"{"a":"pa\/ss\"wo9rd"}"#),
            r#"{"a":"[REDACTED]"}"#
        );
    }

    #[test]
    fn other_text_is_left_alone() {
        let s = secrets();
        let text = r#"{"text":"zk-Tq81Lm9Xv2Pw7Rb4Hc6M \u001b[0m default production"}"#;
        assert!(matches!(s.redact(text), Cow::Borrowed(_)));
        assert!(matches!(
            s.redact("Bearer authentication, sk-learn-compatible-models, task-1234567890abcdefgh"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn a_cut_leaves_no_long_prefix() {
        let s = secrets();
        let text = format!("head {}", &KEY[..10]);
        assert_eq!(s.redact_ending(&text, Ending::Cut), "head [REDACTED]");
        assert_eq!(s.redact_ending(&text, Ending::Whole), text);
        let escaped = format!("head \\u007a{}\\u00", &KEY[1..8]);
        assert_eq!(s.redact_ending(&escaped, Ending::Cut), "head [REDACTED]");
        // Three bytes are left: a key's public prefix, and too little to mean anything.
        let short = format!("head {}", &KEY[..3]);
        assert_eq!(s.redact_ending(&short, Ending::Cut), short);
        // one_line's ellipsis marks a cut inside a text.
        let line = format!("failed: {}… (exit 1)", &KEY[..12]);
        assert_eq!(s.redact(&line), "failed: [REDACTED]… (exit 1)");
        assert_eq!(s.redact("plain… text"), "plain… text");
    }

    #[test]
    fn a_token_cut_short_leaves_at_most_three_characters() {
        let none = Secrets::new(Vec::<String>::new());
        for (text, ending, expected) in [
            ("head sk-ant-api03-Q7", Ending::Cut, "head [REDACTED]"),
            ("x ghp_H5jD8s", Ending::Cut, "x [REDACTED]"),
            ("x ghp_H5j", Ending::Cut, "x ghp_H5j"),
            ("x ghp_H5jD8s", Ending::Whole, "x ghp_H5jD8s"),
            ("a Bearer\tTk9Lm3Np", Ending::Cut, "a Bearer\t[REDACTED]"),
            (
                r"a \u0042earer Tk9L\u006d3Np",
                Ending::Cut,
                r"a \u0042earer [REDACTED]",
            ),
            // A cut inside the escape of the token's next character.
            (r"a eyJhbGci\u004", Ending::Cut, "a [REDACTED]"),
            // one_line's ellipsis is a cut, wherever it is.
            (
                "failed: Bearer abc123def4… (401)",
                Ending::Whole,
                "failed: Bearer [REDACTED]… (401)",
            ),
            (
                "run Bash(curl -H 'authorization: bearer eyJhbGciOiJ…",
                Ending::Whole,
                "run Bash(curl -H 'authorization: bearer [REDACTED]…",
            ),
            // Not a token cut: prose, a prefix alone, too short, not at the cut.
            ("plain… text", Ending::Whole, "plain… text"),
            ("Bearer… and sk-…", Ending::Whole, "Bearer… and sk-…"),
            ("a risk-0123456789…", Ending::Whole, "a risk-0123456789…"),
            // After `Bearer` and `sk-`, prose without a digit.
            (
                "set the Bearer header…",
                Ending::Whole,
                "set the Bearer header…",
            ),
            (
                "uses sk-learn-compatible…",
                Ending::Whole,
                "uses sk-learn-compatible…",
            ),
            ("x eyJhbGci", Ending::Cut, "x [REDACTED]"),
            ("ghp_H5jD8s more…", Ending::Whole, "ghp_H5jD8s more…"),
        ] {
            assert_eq!(none.redact_ending(text, ending), expected, "{text}");
        }
    }

    #[test]
    fn token_shapes() {
        let text = "auth: Bearer abc123def456ghi789 sk-ant-api03-AAAA1111BBBB2222 ok sk-1 ghp_0123456789abcdefABCDEF";
        let out = redact_tokens(text);
        assert_eq!(out, "auth: Bearer [REDACTED] [REDACTED] ok sk-1 [REDACTED]");
        assert_eq!(
            redact_tokens("risk-0123456789abcdefgh"),
            "risk-0123456789abcdefgh"
        );
    }

    #[test]
    fn token_shapes_in_every_json_spelling() {
        let cases = [
            (r"a \u0073k-ant-api03-AAAA1111BBBB2222 b", "a [REDACTED] b"),
            (
                r"a s\u006B\u002Dant-api03-AAAA1111BBBB2222 b",
                "a [REDACTED] b",
            ),
            (r"a sk-ant-api03-AAAA1111\/BBBB2222\/ b", "a [REDACTED] b"),
            (r"x\nsk-ant-api03-AAAA1111BBBB2222", r"x\n[REDACTED]"),
            (r"Bearer\u0020abc123def456ghi789", r"Bearer\u0020[REDACTED]"),
            ("Bearer  abc123def456ghi789", "Bearer  [REDACTED]"),
            ("Bearer\tabc123def456ghi789.", "Bearer\t[REDACTED]"),
            (r"Bearer\tabc123def456ghi789\n", r"Bearer\t[REDACTED]\n"),
            (
                r"\u0042earer abc123\/def456ghi789=,",
                r"\u0042earer [REDACTED],",
            ),
            (
                r#"{"k":"\"ghp_0123456789abcdefABCDEF\""}"#,
                r#"{"k":"\"[REDACTED]\""}"#,
            ),
            (
                r"\u0041\u004b\u0049\u0041\u0030123456789ABCDEF",
                "[REDACTED]",
            ),
            (
                r"sk-ant-api03-AAAA1111BBBB2222\u00e9x",
                r"[REDACTED]\u00e9x",
            ),
            (
                r"\u00e9 \u0073k-ant-api03-AAAA1111BBBB2222",
                r"\u00e9 [REDACTED]",
            ),
            (r"\\\u0073k-ant-api03-AAAA1111BBBB2222", r"\\[REDACTED]"),
            // HTTP's scheme is case-insensitive; a token can follow on the next line.
            ("bearer abc123def456ghi789", "bearer [REDACTED]"),
            (r"\u0062earer abc123def456ghi789", r"\u0062earer [REDACTED]"),
            (r"Bearer\nabc123def456ghi789", r"Bearer\n[REDACTED]"),
            (r"bearer\r\n  abc123def456ghi789", r"bearer\r\n  [REDACTED]"),
            ("Bearer\nabc123def456ghi789", "Bearer\n[REDACTED]"),
            // GitHub's user and refresh tokens; a JSON Web Token (a MiniMax key) whole.
            ("x ghu_0123456789abcdefABCDEF", "x [REDACTED]"),
            ("x ghr_0123456789abcdefABCDEF", "x [REDACTED]"),
            (
                "key=eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl ok",
                "key=[REDACTED] ok",
            ),
            (r"\u0065yJhbGciOiJIUzI1NiJ9.e30.abc", "[REDACTED]"),
        ];
        for (text, expected) in cases {
            assert_eq!(redact_tokens(text), expected, "{text}");
        }
        // Prose in any spelling, and what only looks like an escape (an escaped backslash
        // before `u0073k-`: a reader sees `\u0073k-…`), stay.
        for text in [
            r"Bearer\u0020authentication \u0073k-learn-compatible-models",
            r"ta\u0073k-0123456789abcdefgh \\u0073k-ant-api03-AAAA1111BBBB2222",
            r"Bearer\u0009\u0009authentication, Bearer:abc123def456ghi789",
            "a\\ \\u00 sk-ant-api03-\\u00",
            "bearer authentication, BEARER TOKENS, eyJust-a-word-here",
        ] {
            assert!(matches!(redact_tokens(text), Cow::Borrowed(_)), "{text}");
        }
    }

    #[test]
    fn round_twelve_shapes_and_the_prose_beside_them() {
        let glm = "5371d5ed2fa84618852eee0459455c57.dgquQksHDfyLekKX";
        for (text, expected) in [
            (format!("key={glm} ok"), "key=[REDACTED] ok"),
            (format!(r"\n{glm}"), r"\n[REDACTED]"),
            (format!(r"\u0035{}", &glm[1..]), "[REDACTED]"),
            (
                "Authorization: Basic YWxhZGRpbjpvcGVuc2VzYW1l".to_owned(),
                "Authorization: Basic [REDACTED]",
            ),
            (
                "authorization: token 4f9a2c7e1b8d3f6a0c5e".to_owned(),
                "authorization: token [REDACTED]",
            ),
            ("BEARER Hk4Jm8Ln2Pq6Rs0Tu".to_owned(), "BEARER [REDACTED]"),
            ("x glpat-Xy7Zk2Qm9Wv4Rt8Np3Ls".to_owned(), "x [REDACTED]"),
            (
                "AIzaSyB4kQ9xM2vN7pL3rT8wZ5cY1hJ6fD0gK".to_owned(),
                "[REDACTED]",
            ),
            ("xoxa-1357924680-Qw8Er6Ty4Ui2".to_owned(), "[REDACTED]"),
            ("ghp_QwErTyUiOpAsDfGhJkLzXcVb".to_owned(), "[REDACTED]"),
        ] {
            assert_eq!(redact_tokens(&text), expected, "{text}");
            assert!(
                !Secrets::new(Vec::<String>::new()).surely_clean(text.as_bytes())
                    || cfg!(not(target_arch = "x86_64"))
            );
        }
        for text in [
            "Bearer accessTokenFromEnvironment, sk-XMLHttpRequestFactory",
            "authorization: token-based-authentication-scheme",
            "the Authorization header: Basic authentication-is-deprecated",
            "commit 0f1e2d3c4b5a69788796a5b4c3d2e1f0a1b2c3d4",
            "x0f1e2d3c4b5a69788796a5b4c3d2e1f0.abcdefghijklmnop",
            "0f1e2d3c4b5a69788796a5b4c3d2e1f0.json",
        ] {
            assert!(matches!(redact_tokens(text), Cow::Borrowed(_)), "{text}");
        }
        // A key across a join of pieces known clean is found: the span covers it.
        assert!(Secrets::default().surely_clean_span() > glm.len());
    }

    #[test]
    fn a_token_on_the_line_after_bearer_is_redacted() {
        for line in [
            "curl: Authorization: Bearer",
            "> authorization: Basic  ",
            "Bearer\t",
            "AUTHORIZATION: BEARER",
        ] {
            assert!(awaits_token(line), "{line}");
        }
        for line in ["Bearer authentication", "sk-", "the Bearer scheme.", "ok"] {
            assert!(!awaits_token(line), "{line}");
        }
        assert_eq!(
            redact_continued("  Tk9Lm3Np7Qr1St5Uv/Wx+Yz2 (expired)"),
            "  [REDACTED] (expired)"
        );
        assert_eq!(
            redact_continued("authentication failed"),
            "authentication failed"
        );
    }

    #[test]
    fn a_zai_key_is_found_at_every_offset() {
        let glm = "5371d5ed2fa84618852eee0459455c57.dgquQksHDfyLekKX";
        for offset in 0..200 {
            let text = format!("{} {glm} {}", "q".repeat(offset), "z".repeat(offset % 7));
            let start = offset + 1;
            assert_eq!(
                glm_keys(text.as_bytes()),
                [(start, start + glm.len())],
                "{offset}"
            );
            assert!(
                !Secrets::new(Vec::<String>::new()).surely_clean(text.as_bytes())
                    || cfg!(not(target_arch = "x86_64"))
            );
        }
    }

    #[test]
    fn json_values_are_redacted_decoded() {
        let s = secrets();
        let raw = format!(r#"{{"a":["\u007a{}"],"{KEY}":1,"n":2}}"#, &KEY[1..]);
        let out = s.redact_json_text(&raw).unwrap();
        assert_eq!(out, r#"{"a":["[REDACTED]"],"[REDACTED]":1,"n":2}"#);
        assert_eq!(s.redact_json_text(r#"{"a":"clean"}"#), None);
    }

    #[test]
    fn bearer_and_header_names_in_any_case_lead_to_a_token() {
        let none = Secrets::new(Vec::<String>::new());
        for (text, want) in [
            ("x BeArEr Tk9Lm3Np7Qr1St5Uv y", "x BeArEr [REDACTED] y"),
            (r"bEARER\tTk9Lm3Np7Qr1St5Uv", r"bEARER\t[REDACTED]"),
            (r"\u0062eArEr Tk9Lm3Np7Qr1St5Uv", r"\u0062eArEr [REDACTED]"),
            (
                "AuThOrIzAtIoN: Basic YWxhZGRpbjpvcGVuc2VzYW1l",
                "AuThOrIzAtIoN: Basic [REDACTED]",
            ),
            ("X-API-KEY: Zk4Wq8Xr2Ty6Up0Io", "X-API-KEY: [REDACTED]"),
        ] {
            assert_eq!(redact_tokens(text), want, "{text}");
            assert!(!none.surely_clean(text.as_bytes()), "{text}");
        }
        // Cut short, a token after a mixed-case scheme is dropped too.
        assert_eq!(
            redact_cut_tokens_bytes(b"a BeArEr Tk9Lm3", Ending::Cut).as_deref(),
            Some(&b"a BeArEr [REDACTED]"[..])
        );
        assert!(awaits_token("curl -H 'AUTHORIZATION: BeArEr"));
        // Words and prose stay.
        for text in [
            "the BeArEr scheme",
            "xBeArEr Tk9Lm3Np7Qr1St5Uv",
            "a cleaRER view",
            // The heads the searchers look for, with no word around them.
            "a refeRRER",
            "the hoRIZon",
            "multi-KEY",
            "search heRE: r e r",
        ] {
            assert_eq!(redact_tokens(text), text, "{text}");
        }
        // The old heads (`ear`, `zat`, `-ap`) are no longer searched; the new ones are.
        assert!(none.surely_clean(b"a cleAR yEAR, an organiZATion, the AUTHor, an X-API"));
        assert!(!none.surely_clean(b"the hoRIZon"));
    }

    /// Every spelling of `word` in which each letter is in either case.
    fn every_case(word: &str) -> Vec<String> {
        let letters: Vec<usize> = (0..word.len())
            .filter(|&i| word.as_bytes()[i].is_ascii_alphabetic())
            .collect();
        (0..1u32 << letters.len())
            .map(|mask| {
                let mut bytes = word.as_bytes().to_vec();
                for (bit, &i) in letters.iter().enumerate() {
                    if mask >> bit & 1 == 1 {
                        bytes[i] = bytes[i].to_ascii_uppercase();
                    }
                }
                String::from_utf8(bytes).unwrap()
            })
            .collect()
    }

    #[test]
    fn every_case_of_the_caseless_words_leads_to_a_token() {
        let none = Secrets::new(Vec::<String>::new());
        let known = Secrets::new([KEY]);
        for (word, sep) in [("bearer", " "), ("authorization", ": "), ("x-api-key", "=")] {
            let spellings = every_case(word);
            assert!(spellings.len() >= 64, "{word}");
            for spelled in spellings {
                let text = format!("a {spelled}{sep}Tk9Lm3Np7Qr1St5Uv b");
                let want = format!("a {spelled}{sep}{REDACTED} b");
                assert_eq!(redact_tokens(&text), want, "{text}");
                for set in [&none, &known] {
                    assert!(!set.surely_clean(text.as_bytes()), "{text}");
                    assert_eq!(set.redact(&text), want, "{text}");
                }
            }
        }
    }

    #[test]
    fn each_group_of_the_packed_searchers_has_a_bucket_of_its_own() {
        // Teddy's groups: the same low nybbles in the first three bytes. The first pattern
        // of a group places its bucket, `15 - id % 16` with more than 32 patterns.
        let group = |p: &[u8]| -> Vec<u8> { p[..3].iter().map(|b| b & 15).collect() };
        let check = |patterns: &[Vec<u8>], fixed: usize| {
            assert!(
                patterns.len() > 32 && patterns.len() <= 64,
                "{}",
                patterns.len()
            );
            let mut firsts: Vec<Vec<u8>> = Vec::new();
            for (id, p) in patterns.iter().enumerate() {
                let g = group(p);
                if !firsts.contains(&g) {
                    assert!(id < 16 || id >= fixed, "{}", String::from_utf8_lossy(p));
                    firsts.push(g);
                }
            }
        };
        check(&token_start_patterns(), token_start_patterns().len());
        for secrets in [
            vec![],
            vec![KEY.to_owned()],
            vec![KEY.to_owned(), "hunter2hunter2".to_owned()],
        ] {
            let patterns = anything_patterns(&secrets);
            // The fixed part: every group of it among the first 16.
            check(&patterns, ANYTHING_FIRST.len() + CASELESS_WORDS.len());
            let (_, other_cases) = caseless_heads();
            for p in &patterns[patterns.len() - other_cases.len()..] {
                let head = patterns.iter().position(|q| group(q) == group(p)).unwrap();
                assert!(head < 16, "{}", String::from_utf8_lossy(p));
            }
        }
        // The words' heads are where the words say.
        for w in &CASELESS_WORDS {
            assert_eq!(
                caseless_word_at(w.word.as_bytes(), w.head),
                Some((0, w.word.len(), w.kind))
            );
        }
    }

    #[test]
    fn the_packed_reading_finds_what_the_position_by_position_one_does() {
        // Without `\u` escapes of printable ASCII the tokens are found from the packed
        // search's matches; the spelled reading tries every position. Every arrangement of
        // prefixes, the caseless words in any case, their heads and tokens, next to and
        // overlapping each other, must come out the same (a match the packed search
        // reports must never hide one that starts a token).
        let pieces = [
            "bearer",
            "BeArEr",
            "BEARER",
            "rer",
            "RER",
            "bea",
            "authorization",
            "AuThOrIzAtIoN",
            "autho",
            "riz",
            "RIZ",
            "x-api-key",
            "X-API-KEY",
            "x-api",
            "i-k",
            "I-K",
            "sk-",
            "ghp_",
            "github_pat_",
            "xoxb-",
            "xoxr-",
            "AKIA",
            "AIza",
            "eyJ",
            "glpat-",
            " ",
            "  ",
            ": ",
            "=",
            "\"",
            "\\n",
            "\\t",
            "Tk9Lm3Np7Qr1St5Uv",
            "Basic ",
            "token ",
            "x",
            "e",
            "a",
            "r",
            "-",
            "k",
            "0123456789abcdef",
        ];
        let mut rng = crate::stream::Xorshift(0x2545_f491_4f6c_dd1d);
        let mut redacted = 0;
        for _ in 0..30_000 {
            let text: String = (0..1 + rng.below(10))
                .map(|_| pieces[rng.below(pieces.len())])
                .collect();
            let bytes = text.as_bytes();
            let spelled = replace_tokens(bytes, &spelled_token_matches(bytes));
            let packed = redact_tokens_bytes(bytes);
            assert_eq!(packed, spelled, "{text}");
            redacted += usize::from(matches!(packed, Cow::Owned(_)));
        }
        assert!(redacted > 1_000, "{redacted}");
    }
}
