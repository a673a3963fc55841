//! Attacks on the redaction of token shapes (`sk-…`, `ghp_…`, `ghu_…`, `github_pat_…`,
//! `xoxb-…`, `xoxa-…`, `xoxr-…`, `glpat-…`, `AIza…`, `AKIA…`, a JSON Web Token's `eyJ…`, a
//! Z.ai key's `<32 hex>.<16 letters and digits>`, `Bearer …`, `bearer …`, `BEARER …` and an
//! `Authorization` header's value, with or without a scheme such as `Basic`) coder does
//! not know as values, spelled the ways a JSON text can spell them: any character as a
//! `\u` escape (either case of its hex digits), `/` as `\/`, the space after `Bearer` as
//! `\u0020`, two spaces, a tab (`\t`, `\u0009`), a line break, `Bearer` itself escaped,
//! and a token right after an escape (`\n`, `\t`, `\"`) that a reader sees as a
//! line break or a quote. Each decodes to a token a reader of the transcript or the
//! envelope would see, so each must be redacted: in short event lines, in long ones (written
//! from their own buffer after a search in overlapping pieces) at every offset near the
//! pieces' joins, in the envelope's `all_messages`, `result`, `error_detail`.
//!
//! Every attack line carries a marker, and the transcript must hold every marker and a
//! `[REDACTED]` per attack line, so a test cannot pass because the lines went missing.
//! Prose with the same prefixes (`Bearer authentication`, `sk-learn-compatible-models`), in
//! the same spellings, must come through unchanged.

mod common;

use common::{Fake, json_strings as strings, notice, steps, transcript_of};
use serde_json::{Value, json};

/// A token and the part of it a reader must not see (after the prefix).
struct Token {
    whole: &'static str,
    secret: &'static str,
}

const TOKENS: [Token; 13] = [
    Token {
        whole: "sk-ant-api03-Q7vX2mL9pR4tK8wZ3nB6",
        secret: "ant-api03-Q7vX2mL9pR4tK8wZ3nB6",
    },
    Token {
        whole: "ghp_H5jD8sF2kL0qW9eR4tY7uI1o",
        secret: "H5jD8sF2kL0qW9eR4tY7uI1o",
    },
    Token {
        whole: "github_pat_11AB3cD5eF7gH9iJ0kL2mN4",
        secret: "11AB3cD5eF7gH9iJ0kL2mN4",
    },
    Token {
        whole: "xoxb-2468013579-Zx8Cv6Bn4Mq2",
        secret: "2468013579-Zx8Cv6Bn4Mq2",
    },
    Token {
        whole: "AKIAJ7Q2W9E4R6T1Y3U5",
        secret: "J7Q2W9E4R6T1Y3U5",
    },
    Token {
        whole: "ghu_K3mP8sQ2vX7zL4nR9tW1yB6d",
        secret: "K3mP8sQ2vX7zL4nR9tW1yB6d",
    },
    // A JSON Web Token (a MiniMax key is one).
    Token {
        whole: "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiI3In0.Hd2qX8wRk4N",
        secret: "hbGciOiJIUzI1NiJ9.eyJzdWIiOiI3In0.Hd2qX8wRk4N",
    },
    // A Z.ai (GLM) key: no prefix, and its secret part has no digit.
    Token {
        whole: "5371d5ed2fa84618852eee0459455c57.dgquQksHDfyLekKX",
        secret: "5371d5ed2fa84618852eee0459455c57.dgquQksHDfyLekKX",
    },
    Token {
        whole: "glpat-Xy7Zk2Qm9Wv4Rt8Np3Ls",
        secret: "Xy7Zk2Qm9Wv4Rt8Np3Ls",
    },
    Token {
        whole: "AIzaSyB4kQ9xM2vN7pL3rT8wZ5cY1hJ6fD0gK",
        secret: "SyB4kQ9xM2vN7pL3rT8wZ5cY1hJ6fD0gK",
    },
    Token {
        whole: "xoxa-1357924680-Qw8Er6Ty4Ui2",
        secret: "1357924680-Qw8Er6Ty4Ui2",
    },
    Token {
        whole: "xoxr-9753108642-Az1Sx3Dc5Fv7",
        secret: "9753108642-Az1Sx3Dc5Fv7",
    },
    // A vendor's prefix needs no digit after it: no word starts with `ghp_`.
    Token {
        whole: "ghp_QwErTyUiOpAsDfGhJkLzXcVb",
        secret: "QwErTyUiOpAsDfGhJkLzXcVb",
    },
];

/// `Authorization` headers as code and tools print them, each with the value a reader
/// must not see: a `Basic` user and password (base64 without a digit), GitHub's `token`
/// scheme, upper-case `BEARER`, a raw key, JSON's quoted header, a scheme in mixed case;
/// and Anthropic's `x-api-key` header, as curl and the SDKs print it and as Go
/// canonicalises it (`X-Api-Key`). HTTP reads the scheme and the header names in any case:
/// `BeArEr`, `AuThOrIzAtIoN` and `X-API-KEY` (in mixed case, they were not redacted).
const HEADERS: [(&str, &str); 12] = [
    ("x-api-key: Zk4Wq8Xr2Ty6Up0Io", "Zk4Wq8Xr2Ty6Up0Io"),
    (
        r#"\"X-Api-Key\": \"Mn3Bv7Cx1Zl5Kj9Hg\""#,
        "Mn3Bv7Cx1Zl5Kj9Hg",
    ),
    (
        "authorization: BeArEr Pq2Wo6Ei0Ru4Ty8Yu",
        "Pq2Wo6Ei0Ru4Ty8Yu",
    ),
    (
        "Authorization: Basic YWxhZGRpbjpvcGVuc2VzYW1l",
        "YWxhZGRpbjpvcGVuc2VzYW1l",
    ),
    (
        "authorization: token 4f9a2c7e1b8d3f6a0c5e9b2d7a4f1c8e6b3d0a5f",
        "4f9a2c7e1b8d3f6a0c5e9b2d7a4f1c8e6b3d0a5f",
    ),
    (
        "AUTHORIZATION: BEARER Qz7Wx3Ec9Rv5Tb1Yn",
        "Qz7Wx3Ec9Rv5Tb1Yn",
    ),
    ("BEARER Hk4Jm8Ln2Pq6Rs0Tu", "Hk4Jm8Ln2Pq6Rs0Tu"),
    (
        r#"\"Authorization\": \"Zq3Xw7Cv1Bn5Mk9Lp\""#,
        "Zq3Xw7Cv1Bn5Mk9Lp",
    ),
    (
        "Authorization=Digest VGhpc0lzTm90QVJlYWxQYXNzd29yZA",
        "VGhpc0lzTm90QVJlYWxQYXNzd29yZA",
    ),
    ("BeArEr Vb5Nm9Qw3Er7Ty1Ui", "Vb5Nm9Qw3Er7Ty1Ui"),
    ("AuThOrIzAtIoN: Xc4Vb8Nm2Qw6Er0Ty", "Xc4Vb8Nm2Qw6Er0Ty"),
    ("X-API-KEY: Lk3Jh7Gf1Ds5Az9Qw", "Lk3Jh7Gf1Ds5Az9Qw"),
];

/// A bearer token with the base64 characters `/`, `+` and `=`.
const BEARER_TOKEN: &str = "Tk9Lm3Np7Qr1St5Uv/Wx+Yz2/Gh8==";

/// A known value in coder's environment: with one, the pre-filter searches `\u00` (the
/// escapes of its ASCII characters); without, only what a token shape needs.
const KNOWN: (&str, &str) = ("ANTHROPIC_AUTH_TOKEN", "zq7-Ky3pW9vXm2Lr8Tn4Bc6H");

/// Prose with token prefixes, in spellings a JSON text may give it: never redacted.
const PROSE: [&str; 20] = [
    "the BeArEr scheme, AuThOrIzAtIoN: Basic authentication-is-deprecated",
    "x-api-key: your-api-key-here",
    "set the X-Api-Key header to the key",
    "Bearer authentication",
    r"Bearer\tauthentication",
    r"\u0042earer\u0020authentication",
    "Bearer  authentication",
    "sk-learn-compatible-models",
    r"\u0073k-learn\u002Dcompatible-models",
    r"task-1234567890abcdefgh\nrisk-0123456789abcdefgh",
    r"ghp_short1 \u0041KIA-is-not-a-key",
    "bearer authentication, BEARER TOKENS",
    r"bearer\nauthentication \u0065yJust-a-word-here",
    "Bearer accessTokenFromEnvironment, sk-XMLHttpRequestFactory",
    "the Authorization header: Basic authentication-is-deprecated",
    "authorization: token-based-authentication-scheme",
    "commit 0f1e2d3c4b5a69788796a5b4c3d2e1f0a1b2c3d4 and blob 0f1e2d3c4b5a69788796a5b4c3d2e1f0.json",
    "AUTHORIZATION FAILED, BEARER ONLY",
    r"Authorization\u003a Basic\u0020authentication-is-deprecated",
    "a hoRIZontal refeRRER, multi-KEY: x-api-keys-are-documented-here, BEARERS Hq5Wd9Pz3Ky7Gv1Jx",
];

/// The JSON escape of an ASCII character, its hex digits in upper or lower case.
fn escape(c: char, upper: bool) -> String {
    if upper {
        format!("\\u{:04X}", c as u32)
    } else {
        format!("\\u{:04x}", c as u32)
    }
}

/// `text` with every character escaped.
fn all_escaped(text: &str, upper: bool) -> String {
    text.chars().map(|c| escape(c, upper)).collect()
}

/// `text` with its character `at` escaped (upper-case hex when `at` is odd).
fn one_escaped(text: &str, at: usize) -> String {
    text.chars()
        .enumerate()
        .map(|(i, c)| {
            if i == at {
                escape(c, i % 2 == 1)
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// The separators a JSON text can put between `Bearer` and its token (a line break too:
/// the token then starts the next line a reader sees).
const SEPARATORS: [&str; 10] = [
    r"\u0020",
    "  ",
    r"\t",
    r"\u0009",
    r" \t ",
    r"\u0020\u0020",
    r"\u0009 ",
    r"\n",
    r"\r\n",
    r"\u000a",
];

/// Every spelling attacked, each with the secret it decodes to: every character of every
/// token escaped alone, all escaped (both cases), `/` as `\/`, the bearer separators, the
/// word `Bearer` escaped, and tokens right after an escape.
fn spellings() -> Vec<(String, &'static str)> {
    let mut out = Vec::new();
    for token in &TOKENS {
        let len = token.whole.chars().count();
        for at in 0..len {
            out.push((one_escaped(token.whole, at), token.secret));
        }
        out.push((all_escaped(token.whole, false), token.secret));
        out.push((all_escaped(token.whole, true), token.secret));
        for before in [r"\n", r"\t", r#"\""#, r"\r\n", r"\u000a"] {
            out.push((format!("{before}{}", token.whole), token.secret));
        }
    }
    let slashed = BEARER_TOKEN.replace('/', r"\/");
    for sep in SEPARATORS {
        out.push((format!("Bearer{sep}{BEARER_TOKEN}"), BEARER_TOKEN));
        out.push((format!("Bearer{sep}{slashed}"), BEARER_TOKEN));
    }
    // HTTP's scheme is case-insensitive: HTTP/2 tools and code print it in lower case.
    out.push((format!("bearer {BEARER_TOKEN}"), BEARER_TOKEN));
    out.push((format!(r"\u0062earer\t{slashed}"), BEARER_TOKEN));
    out.push((format!(r"bearer\n{BEARER_TOKEN}"), BEARER_TOKEN));
    for at in 0.."Bearer ".len() {
        out.push((
            format!("{}{slashed}", one_escaped("Bearer ", at)),
            BEARER_TOKEN,
        ));
    }
    out.push((
        format!(
            "{}{}",
            all_escaped("Bearer ", true),
            all_escaped(BEARER_TOKEN, false)
        ),
        BEARER_TOKEN,
    ));
    for at in 0..BEARER_TOKEN.len() {
        out.push((
            format!("Bearer {}", one_escaped(BEARER_TOKEN, at)),
            BEARER_TOKEN,
        ));
    }
    out.push((format!(r"\nBearer {BEARER_TOKEN}"), BEARER_TOKEN));
    for (header, secret) in HEADERS {
        out.push((header.to_owned(), secret));
        let first_letter = header.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(0);
        out.push((one_escaped(header, first_letter), secret));
        out.push((header.replace(' ', r"\u0020"), secret));
    }
    out
}

/// A short event line: `text` in a notice.
fn short(mark: &str, text: &str) -> String {
    format!(r#"{{"type":"system","subtype":"notice","text":"{mark} {text} end"}}"#)
}

/// Fails when `text` (a channel, raw or decoded) holds 8 consecutive bytes of a secret.
fn assert_no_piece(channel: &str, text: &str, secrets: &[&str]) {
    for secret in secrets {
        for piece in secret.as_bytes().windows(8) {
            let piece = std::str::from_utf8(piece).unwrap();
            if let Some(at) = text.find(piece) {
                let bytes = text.as_bytes();
                let around = &bytes[at.saturating_sub(120)..(at + 120).min(bytes.len())];
                panic!(
                    "{channel} holds {piece:?} of {secret:?}: …{}…",
                    String::from_utf8_lossy(around)
                );
            }
        }
    }
}

/// Fails when the transcript holds a secret (raw, spelled, or in a decoded string), lacks a
/// marker of `marks`, or has fewer than `redactions` redactions.
fn assert_clean(raw: &[u8], attacks: &[(String, &str)], marks: &[String], redactions: usize) {
    let text = String::from_utf8_lossy(raw);
    let secrets: Vec<&str> = attacks.iter().map(|(_, s)| *s).collect();
    assert_no_piece("the transcript", &text, &secrets);
    for (spelled, _) in attacks {
        assert!(
            !text.contains(spelled.as_str()),
            "the transcript holds {spelled:?}"
        );
    }
    let mut decoded = String::new();
    for line in text.lines() {
        let entry: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("a transcript line is not JSON ({e}): {line:.300}"));
        decoded.push_str(&strings(&entry));
        decoded.push('\n');
    }
    assert_no_piece("the transcript's decoded strings", &decoded, &secrets);
    for mark in marks {
        assert!(
            text.contains(mark.as_str()),
            "{mark} missing: the line did not arrive"
        );
    }
    let found = text.matches("[REDACTED]").count();
    assert!(
        found >= redactions,
        "{found} redactions, {redactions} expected at least"
    );
}

/// The prose lines, marked; the transcript must hold each exactly as it was printed.
fn prose_lines() -> Vec<String> {
    PROSE
        .iter()
        .enumerate()
        .map(|(i, p)| short(&format!("prose{i:02}"), p))
        .collect()
}

fn assert_prose_kept(raw: &[u8]) {
    let text = String::from_utf8_lossy(raw);
    for line in prose_lines() {
        assert!(text.contains(&line), "prose was changed: {line}");
    }
}

#[test]
fn token_shapes_in_every_json_spelling_leave_no_trace_in_the_transcript() {
    let attacks = spellings();
    let mut lines = Vec::new();
    let mut marks = Vec::new();
    for (spelled, _) in &attacks {
        let mark = format!("mark{:04}", lines.len());
        lines.push(short(&mark, spelled));
        marks.push(mark);
    }
    lines.extend(prose_lines());
    // With no known value (the pre-filter searches only what a token needs) and with one.
    for env in [&[][..], &[KNOWN]] {
        let raw = transcript_of(&lines, env);
        assert_clean(&raw, &attacks, &marks, attacks.len());
        assert_prose_kept(&raw);
    }
}

#[test]
fn spelled_token_shapes_at_every_offset_near_the_long_line_joins() {
    // Lines of 2 KiB and more are searched in pieces overlapping by the longest pattern
    // less one byte: the spelled token ends 0 to 20 bytes before the string's end, or
    // starts the event 0 to 20 bytes after the line's start.
    let forms: Vec<(String, &str)> = vec![
        (all_escaped(TOKENS[0].whole, true), TOKENS[0].secret),
        (one_escaped(TOKENS[2].whole, 6), TOKENS[2].secret),
        (one_escaped(TOKENS[1].whole, 0), TOKENS[1].secret),
        (one_escaped(TOKENS[4].whole, 3), TOKENS[4].secret),
        (format!(r"\n{}", TOKENS[3].whole), TOKENS[3].secret),
        // A Z.ai key has no prefix: the pieces must overlap by the whole key.
        (TOKENS[7].whole.to_owned(), TOKENS[7].secret),
        (format!(r"\u000a{}", TOKENS[7].whole), TOKENS[7].secret),
        (HEADERS[0].0.to_owned(), HEADERS[0].1),
        (HEADERS[9].0.to_owned(), HEADERS[9].1),
        // The words read in any case, mixed case at the bytes the pre-filter looks for
        // (`rer`, `riz`, `i-k`) and elsewhere.
        (HEADERS[10].0.to_owned(), HEADERS[10].1),
        (HEADERS[11].0.to_owned(), HEADERS[11].1),
        (format!("beaReR {BEARER_TOKEN}"), BEARER_TOKEN),
        (
            "auThoRiZation: Xc4Vb8Nm2Qw6Er0Ty".to_owned(),
            "Xc4Vb8Nm2Qw6Er0Ty",
        ),
        (
            "x-aPI-kEy=Lk3Jh7Gf1Ds5Az9Qw".to_owned(),
            "Lk3Jh7Gf1Ds5Az9Qw",
        ),
        (format!(r"Bearer\u0020{BEARER_TOKEN}"), BEARER_TOKEN),
        (format!(r"Bearer\t{BEARER_TOKEN}"), BEARER_TOKEN),
        (
            format!(r"\u0042earer {}", BEARER_TOKEN.replace('/', r"\/")),
            BEARER_TOKEN,
        ),
    ];
    let mut lines = Vec::new();
    let mut marks = Vec::new();
    for (form, _) in &forms {
        for offset in 0..=20 {
            let mark = format!("mark{:04}", lines.len());
            lines.push(notice(
                &mark,
                &format!("{form} "),
                offset,
                2048 + offset % 3,
            ));
            marks.push(mark);
            let mark = format!("mark{:04}", lines.len());
            let body = notice(&mark, "", 0, 2048 + offset % 2);
            lines.push(format!(
                r#"{{"{}{form}":1,{}"#,
                "-".repeat(offset),
                &body[1..]
            ));
            marks.push(mark);
        }
    }
    for env in [&[][..], &[KNOWN]] {
        let raw = transcript_of(&lines, env);
        assert_clean(&raw, &forms, &marks, lines.len());
    }
}

#[test]
fn spelled_token_shapes_leave_no_trace_in_the_envelope() {
    // `all_messages` (the events, decoded), `result` and `error_detail.message` (decoded
    // strings: a tab or two spaces after `Bearer`), `last_lines` (the raw lines).
    let attacks = spellings();
    let tabbed = format!("Bearer\t{BEARER_TOKEN}");
    let spaced = format!("Bearer  {}", TOKENS[0].whole);
    let mixed = format!("BeArEr {BEARER_TOKEN}");
    let run = |failing: bool| {
        let mut scenario = vec![steps::init()];
        for (i, (spelled, _)) in attacks.iter().enumerate() {
            scenario.push(json!({"step": "emit", "text": short(&format!("mark{i:04}"), spelled)}));
        }
        for line in prose_lines() {
            scenario.push(json!({"step": "emit", "text": line}));
        }
        scenario.push(steps::text(&format!("told: {tabbed} and {spaced}")));
        let text = format!("done: {tabbed} and {spaced} and {mixed}, Bearer authentication");
        if failing {
            scenario.push(
                json!({"step": "result", "is_error": true, "api_error_status": 401,
                "text": text}),
            );
        } else {
            scenario.push(steps::result_ok(&text));
        }
        let fake = Fake::new(Value::Array(scenario));
        let out = fake
            .coder()
            .args(["--return-all-messages", "--log-metrics"])
            .arg("task")
            .run();
        assert_eq!(
            out.envelope["success"],
            json!(!failing),
            "{}",
            out.explain()
        );
        out
    };
    let secrets: Vec<&str> = attacks
        .iter()
        .map(|(_, s)| *s)
        .chain([TOKENS[0].secret])
        .collect();
    for failing in [false, true] {
        let out = run(failing);
        assert_no_piece("stdout", &out.stdout, &secrets);
        assert_no_piece("stderr", &out.stderr, &secrets);
        let decoded = strings(&out.envelope);
        assert_no_piece("the envelope's strings", &decoded, &secrets);
        let messages = strings(&out.envelope["all_messages"]);
        for i in 0..attacks.len() {
            assert!(
                messages.contains(&format!("mark{i:04}")),
                "mark{i:04} missing from all_messages"
            );
        }
        for prose in ["Bearer authentication", "sk-learn-compatible-models"] {
            assert!(messages.contains(prose), "{prose:?} lost from all_messages");
        }
        let result = if failing {
            out.envelope["error_detail"]["message"].to_string()
        } else {
            out.envelope["result"].to_string()
        };
        assert!(
            result.contains("Bearer authentication") && result.contains("[REDACTED]"),
            "{result}"
        );
        if failing {
            let last = out.last_lines().join("\n");
            assert!(last.contains("[REDACTED]"), "{last}");
            assert_no_piece("last_lines", &last, &secrets);
        }
    }
}

/// A token cut short where coder cuts a text: the transcript keeps the 16 KiB head of a
/// line longer than 256 KiB, the error summary the first 200 characters of the CLI's
/// error. What is left of the token there (fewer than 16 characters, too few to be taken
/// for a token whole) is dropped from its fourth character on; the same cut through prose
/// keeps it.
#[test]
fn token_shapes_cut_short_leave_no_piece() {
    const HEAD: usize = 16 * 1024;
    // `text` starts a word 10 bytes before the head's end.
    let across_cut = |fill: &str, text: &str| {
        let line = format!(
            "{} {text}{}",
            fill.repeat(HEAD - 11),
            fill.repeat(270 * 1024)
        );
        steps::stderr(&line)
    };
    // The error summary (the envelope's `error`) is the CLI's error cut at 200
    // characters: 12 of the token's 30 are before the cut.
    let error = format!("{} Bearer {BEARER_TOKEN} tail", "e".repeat(180));
    let fake = Fake::new(json!([
        steps::init(),
        across_cut("y", TOKENS[1].whole),
        across_cut("z", "Bearer authentication"),
        {"step": "result", "is_error": true, "api_error_status": 401, "text": error},
    ]));
    let out = fake.coder().arg("task").run();
    assert_eq!(out.envelope["success"], json!(false), "{}", out.explain());
    let message = out.envelope["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.contains("e Bearer "),
        "the cut is not where the test wants it: {message}"
    );
    let secrets = [BEARER_TOKEN, TOKENS[1].secret];
    assert_no_piece("the error summary", &message, &secrets);
    for piece in [&BEARER_TOKEN[..4], &TOKENS[1].secret[..4]] {
        assert!(
            !out.stdout.contains(piece),
            "stdout holds {piece:?}: {}",
            out.stdout
        );
    }
    let path = out.envelope["transcript"].as_str().unwrap();
    let raw = std::fs::read_to_string(path).unwrap();
    assert!(
        raw.contains(&format!("{} [REDACTED]", "y".repeat(64))),
        "the token across the transcript's cut is not redacted"
    );
    assert!(
        !raw.contains(&TOKENS[1].whole[..8]),
        "the transcript holds a piece of the token"
    );
    // Three characters left of a word after `Bearer` are kept.
    assert!(raw.contains(&format!("{} Bearer aut", "z".repeat(64))));
}

/// A `…` in what the transcript records as JSON is a cut too: the head it keeps of a long
/// task (`… [truncated: N bytes in all]`), and a text the child cut itself.
#[test]
fn token_shapes_cut_short_before_an_ellipsis_in_the_transcript_leave_no_piece() {
    const PROMPT_HEAD: usize = 64 * 1024;
    let task = format!(
        "{} {} and more",
        "x".repeat(PROMPT_HEAD - 11),
        TOKENS[1].whole
    );
    let fake = Fake::new(json!([
        steps::init(),
        {"step": "emit", "text": short("mark0", &format!("{}…", &TOKENS[0].whole[..18]))},
        steps::result_ok("done"),
    ]));
    let out = fake.coder().stdin(task).arg("-").run();
    assert_eq!(out.envelope["success"], json!(true), "{}", out.explain());
    let path = out.envelope["transcript"].as_str().unwrap();
    let raw = std::fs::read_to_string(path).unwrap();
    assert!(
        raw.contains(&format!("{} [REDACTED]… [truncated:", "x".repeat(64))),
        "the task's head does not end as the test wants"
    );
    assert!(
        raw.contains("mark0 [REDACTED]… end"),
        "the notice is not redacted"
    );
    assert!(!raw.contains(&TOKENS[1].whole[..8]));
    assert!(!raw.contains(&TOKENS[0].whole[..10]));
}
