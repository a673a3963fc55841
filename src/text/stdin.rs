//! Reading the task from standard input, for the run mode (`coder … -`, or no prompt) and
//! `coder prompt`. One rule for both: a terminal on stdin is not a task (nobody is going to
//! type one, and waiting would look like a hang), the task must be UTF-8, and no more than
//! a caller's bound is read (an endless pipe is refused, not buffered until memory runs out).

use std::io::{IsTerminal, Read};

/// Why no task could be read from stdin.
#[derive(Debug, thiserror::Error)]
pub enum StdinError {
    #[error("stdin is a terminal")]
    Terminal,
    #[error("cannot read stdin: {0}")]
    Io(#[source] std::io::Error),
    /// Where: the first byte of the first invalid sequence (0-based), on its 1-based
    /// line, and that byte.
    #[error(
        "stdin is not valid UTF-8: it stops being UTF-8 at byte {at} (line {line}, byte \
         {byte:#04x}); convert the text to UTF-8 (iconv -t UTF-8) or remove that byte"
    )]
    NotUtf8 { at: usize, line: usize, byte: u8 },
    #[error("stdin holds more than {max_bytes} bytes")]
    TooLarge { max_bytes: usize },
}

/// The whole of `input` as text, at most `max_bytes` of it; refused when coder's own stdin
/// is a terminal.
pub fn read_task(input: &mut dyn Read, max_bytes: usize) -> Result<String, StdinError> {
    read_task_unless(std::io::stdin().is_terminal(), input, max_bytes)
}

fn read_task_unless(
    terminal: bool,
    input: &mut dyn Read,
    max_bytes: usize,
) -> Result<String, StdinError> {
    if terminal {
        return Err(StdinError::Terminal);
    }
    let mut bytes = Vec::new();
    let limit = u64::try_from(max_bytes)
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    input
        .take(limit)
        .read_to_end(&mut bytes)
        .map_err(StdinError::Io)?;
    if bytes.len() > max_bytes {
        return Err(StdinError::TooLarge { max_bytes });
    }
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        StdinError::NotUtf8 {
            at,
            line: bytes[..at].iter().filter(|&&b| b == b'\n').count() + 1,
            byte: bytes.get(at).copied().unwrap_or_default(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_utf8_and_refuses_terminals_and_bytes() {
        assert_eq!(
            read_task_unless(false, &mut &b"fix it"[..], 6).unwrap(),
            "fix it"
        );
        assert!(matches!(
            read_task_unless(false, &mut &b"fix it"[..], 5),
            Err(StdinError::TooLarge { max_bytes: 5 })
        ));
        assert!(matches!(
            read_task_unless(true, &mut &b"x"[..], 10),
            Err(StdinError::Terminal)
        ));
        assert!(matches!(
            read_task_unless(false, &mut &b"\xff"[..], 10),
            Err(StdinError::NotUtf8 {
                at: 0,
                line: 1,
                byte: 0xff
            })
        ));
    }
}
