//! Confinement of the child. The parent resolves what the child may touch; the helper
//! process ([`helper`]), a fresh single-threaded re-execution of coder, applies it right
//! before `execve`, so no confinement code ever runs inside the multi-task supervisor.

pub mod helper;
