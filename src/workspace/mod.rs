//! The workspace a run works in: the jailed file operations of the MCP server and
//! `coder fs` ([`fs`]).

pub mod fs;
