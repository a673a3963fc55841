//! One home for the text rules every part of coder applies the same way: shortening text
//! to one line for messages.

/// The first line of `text`, cut to `max_chars` characters with an ellipsis.
pub fn one_line(text: &str, max_chars: usize) -> String {
    let first = text.lines().next().unwrap_or("");
    let mut out: String = first.chars().take(max_chars).collect();
    if first.chars().count() > max_chars || text.lines().nth(1).is_some() {
        out.push('…');
    }
    out
}
