//! Reading the task from standard input, for the run mode (`coder … -`, or no prompt) and
//! `coder prompt`. One rule for both: a terminal on stdin is not a task (nobody is going to
//! type one, and waiting would look like a hang), and the task must be UTF-8.

use std::io::{IsTerminal, Read};

/// Why no task could be read from stdin.
#[derive(Debug, thiserror::Error)]
pub enum StdinError {
    #[error("stdin is a terminal")]
    Terminal,
    #[error("cannot read stdin: {0}")]
    Io(#[source] std::io::Error),
    #[error("stdin is not valid UTF-8")]
    NotUtf8,
}

/// The whole of `input` as text; refused when coder's own stdin is a terminal.
pub fn read_task(input: &mut dyn Read) -> Result<String, StdinError> {
    read_task_unless(std::io::stdin().is_terminal(), input)
}

fn read_task_unless(terminal: bool, input: &mut dyn Read) -> Result<String, StdinError> {
    if terminal {
        return Err(StdinError::Terminal);
    }
    let mut bytes = Vec::new();
    input.read_to_end(&mut bytes).map_err(StdinError::Io)?;
    String::from_utf8(bytes).map_err(|_| StdinError::NotUtf8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_utf8_and_refuses_terminals_and_bytes() {
        assert_eq!(
            read_task_unless(false, &mut &b"fix it"[..]).unwrap(),
            "fix it"
        );
        assert!(matches!(
            read_task_unless(true, &mut &b"x"[..]),
            Err(StdinError::Terminal)
        ));
        assert!(matches!(
            read_task_unless(false, &mut &b"\xff"[..]),
            Err(StdinError::NotUtf8)
        ));
    }
}
