//! The smallest HTTP/1.1 a replay server needs: read one request (Content-Length or chunked
//! body, `Expect: 100-continue`, keep-alive) and write response heads and chunks.
//!
//! It is written by hand rather than taken from an HTTP library because the faults a
//! cassette plays are faults of the wire itself: headers that never come, a chunked stream
//! that stops mid-way and stays silent, a connection reset between two events. Owning the
//! bytes makes each of those exact. Sizes are capped so a confused client cannot make the
//! server buffer without bound.

use std::fmt::Write as _;
use std::io;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The request line and headers may not exceed this.
pub(crate) const MAX_HEAD_BYTES: usize = 64 * 1024;
/// A request body may not exceed this (a long session's history is a few MiB).
pub(crate) const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// One parsed request.
#[derive(Debug)]
pub(crate) struct Request {
    pub method: String,
    /// The request target as sent: path and query.
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// HTTP/1.0, or `Connection: close`: the connection ends after the response.
    pub close: bool,
}

impl Request {
    /// The value of the first header called `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The target without its query.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }
}

/// Why a request could not be read.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// The socket failed or closed mid-request: nothing can be answered.
    Broken,
    /// The bytes are not a request we can read: answer with this status and message.
    Reject { status: u16, message: String },
}

impl From<io::Error> for ReadError {
    fn from(_: io::Error) -> Self {
        ReadError::Broken
    }
}

fn reject(status: u16, message: impl Into<String>) -> ReadError {
    ReadError::Reject {
        status,
        message: message.into(),
    }
}

/// Reads the next request from `stream`. `buffer` carries bytes already read past the end
/// of the previous request. Returns `Ok(None)` when the client closed the connection
/// cleanly between requests.
pub(crate) async fn read_request(
    stream: &mut TcpStream,
    buffer: &mut Vec<u8>,
) -> Result<Option<Request>, ReadError> {
    let Some(head) = read_head(stream, buffer).await? else {
        return Ok(None);
    };
    let mut request = parse_head(&head)?;
    let chunked = request
        .header("transfer-encoding")
        .is_some_and(|te| te.to_ascii_lowercase().contains("chunked"));
    let length = match request.header("content-length") {
        Some(value) if !chunked => Some(
            value
                .parse::<usize>()
                .map_err(|_| reject(400, format!("bad content-length {value:?}")))?,
        ),
        _ => None,
    };
    if length.is_some_and(|n| n > MAX_BODY_BYTES) {
        return Err(reject(413, "request body larger than 64 MiB"));
    }
    let has_body = chunked || length.is_some_and(|n| n > 0);
    if has_body
        && request
            .header("expect")
            .is_some_and(|e| e.eq_ignore_ascii_case("100-continue"))
    {
        stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
    }
    if chunked {
        request.body = read_chunked(stream, buffer).await?;
    } else if let Some(length) = length {
        fill(stream, buffer, length).await?;
        request.body = buffer.drain(..length).collect();
    }
    Ok(Some(request))
}

/// The next request's head (request line and headers, without the blank line that ends
/// them), taken out of `buffer`, reading more as needed; `None` when the client closed the
/// connection cleanly between requests.
async fn read_head(
    stream: &mut TcpStream,
    buffer: &mut Vec<u8>,
) -> Result<Option<String>, ReadError> {
    let head_end = loop {
        // Tolerate blank lines before a request line (RFC 9112 §2.2).
        let blank = buffer
            .iter()
            .take_while(|b| **b == b'\r' || **b == b'\n')
            .count();
        buffer.drain(..blank);
        if let Some(end) = find(buffer, b"\r\n\r\n") {
            break end;
        }
        if buffer.len() > MAX_HEAD_BYTES {
            return Err(reject(431, "request head larger than 64 KiB"));
        }
        if stream.read_buf(buffer).await? == 0 {
            if buffer.is_empty() {
                return Ok(None);
            }
            return Err(ReadError::Broken);
        }
    };
    let head = std::str::from_utf8(&buffer[..head_end])
        .map_err(|_| reject(400, "request head is not UTF-8"))?
        .to_string();
    buffer.drain(..head_end + 4);
    Ok(Some(head))
}

/// A target's path and query: the absolute form a client sends through a proxy
/// (`http://127.0.0.1:PORT/v1/messages?beta=true`, what coder's egress proxy passes on
/// for a confined run's CLI) is the same request as its origin form (RFC 9112 §3.2.2), and
/// the report names both alike.
fn origin_form(target: &str) -> &str {
    let Some(rest) = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("https://"))
    else {
        return target;
    };
    match rest.find(['/', '?']) {
        Some(at) if rest[at..].starts_with('/') => &rest[at..],
        _ => "/",
    }
}

/// The request a head describes (its body still to be read), and whether the connection
/// ends after it.
fn parse_head(head: &str) -> Result<Request, ReadError> {
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or("");
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(reject(
            400,
            format!("malformed request line {request_line:?}"),
        ));
    };
    let http_1_0 = match version {
        "HTTP/1.1" => false,
        "HTTP/1.0" => true,
        other => return Err(reject(505, format!("unsupported protocol {other:?}"))),
    };
    let mut headers = Vec::new();
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err(reject(400, format!("malformed header line {line:?}")));
        };
        headers.push((name.trim().to_string(), value.trim().to_string()));
    }
    let mut request = Request {
        method: method.to_string(),
        target: origin_form(target).to_string(),
        headers,
        body: Vec::new(),
        close: false,
    };
    let connection = request
        .header("connection")
        .unwrap_or("")
        .to_ascii_lowercase();
    request.close = if http_1_0 {
        !connection.contains("keep-alive")
    } else {
        connection.contains("close")
    };
    Ok(request)
}

/// Decodes a chunked body, trailers included.
async fn read_chunked(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Result<Vec<u8>, ReadError> {
    let mut body = Vec::new();
    loop {
        let line = read_line(stream, buffer).await?;
        let size_text = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| reject(400, format!("bad chunk size {size_text:?}")))?;
        if size == 0 {
            // Trailers, up to the blank line that ends the message.
            while !read_line(stream, buffer).await?.is_empty() {}
            return Ok(body);
        }
        if body.len() + size > MAX_BODY_BYTES {
            return Err(reject(413, "request body larger than 64 MiB"));
        }
        fill(stream, buffer, size + 2).await?;
        body.extend(buffer.drain(..size));
        if buffer.drain(..2).as_slice() != b"\r\n" {
            return Err(reject(400, "chunk not followed by CRLF"));
        }
    }
}

/// One CRLF-terminated line, without the CRLF.
async fn read_line(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Result<String, ReadError> {
    loop {
        if let Some(end) = find(buffer, b"\r\n") {
            let line = String::from_utf8_lossy(&buffer[..end]).into_owned();
            buffer.drain(..end + 2);
            return Ok(line);
        }
        if buffer.len() > MAX_HEAD_BYTES {
            return Err(reject(400, "chunk header line too long"));
        }
        if stream.read_buf(buffer).await? == 0 {
            return Err(ReadError::Broken);
        }
    }
}

/// Reads until `buffer` holds at least `wanted` bytes.
async fn fill(stream: &mut TcpStream, buffer: &mut Vec<u8>, wanted: usize) -> io::Result<()> {
    while buffer.len() < wanted {
        if stream.read_buf(buffer).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// `HTTP/1.1 <status> <reason>` plus the headers and the blank line.
pub(crate) fn response_head(status: u16, headers: &[(String, String)]) -> Vec<u8> {
    let mut head = format!("HTTP/1.1 {status} {}\r\n", reason_phrase(status));
    for (name, value) in headers {
        let _ = write!(head, "{name}: {value}\r\n");
    }
    head.push_str("\r\n");
    head.into_bytes()
}

/// One chunk of a chunked body.
pub(crate) fn chunk(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

/// The chunk that ends a chunked body.
pub(crate) const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        529 => "Overloaded",
        _ => "Status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// Sends `raw` to a fresh server socket and reads requests from it until it closes.
    async fn parse_all(raw: &'static [u8]) -> Vec<Result<Request, String>> {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(raw).await.unwrap();
            s.shutdown().await.unwrap();
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink).await;
            sink
        });
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut buffer = Vec::new();
        let mut out = Vec::new();
        loop {
            match read_request(&mut stream, &mut buffer).await {
                Ok(Some(r)) => out.push(Ok(r)),
                Ok(None) => break,
                Err(ReadError::Reject { status, message }) => {
                    out.push(Err(format!("{status} {message}")));
                    break;
                }
                Err(ReadError::Broken) => {
                    out.push(Err("broken".to_string()));
                    break;
                }
            }
        }
        drop(stream);
        client.await.unwrap();
        out
    }

    #[tokio::test]
    async fn keep_alive_requests_with_both_body_framings() {
        let out = parse_all(
            b"POST /v1/messages?beta=true HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}\
              POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\nX-T: 1\r\n\r\n\
              GET / HTTP/1.0\r\n\r\n",
        )
        .await;
        assert_eq!(out.len(), 3, "{out:?}");
        let first = out[0].as_ref().unwrap();
        assert_eq!(first.method, "POST");
        assert_eq!(first.path(), "/v1/messages");
        assert_eq!(first.header("content-length"), Some("2"));
        assert_eq!(first.body, b"{}");
        assert!(!first.close);
        assert_eq!(out[1].as_ref().unwrap().body, b"abcde");
        assert!(out[2].as_ref().unwrap().close);
    }

    #[tokio::test]
    async fn garbage_is_rejected_with_a_status() {
        let out = parse_all(b"NONSENSE\r\n\r\n").await;
        assert!(matches!(&out[0], Err(e) if e.starts_with("400 malformed request line")));
        let out = parse_all(b"GET / HTTP/2.0\r\n\r\n").await;
        assert!(matches!(&out[0], Err(e) if e.starts_with("505")));
        let out = parse_all(b"POST / HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n").await;
        assert!(matches!(&out[0], Err(e) if e.starts_with("413")));
    }

    #[tokio::test]
    async fn a_truncated_body_is_an_io_error() {
        let out = parse_all(b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc").await;
        assert!(matches!(&out[0], Err(e) if e == "broken"), "{out:?}");
    }

    #[test]
    fn heads_and_chunks_are_framed() {
        let head = response_head(429, &[("retry-after".into(), "1".into())]);
        assert_eq!(
            head,
            b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 1\r\n\r\n"
        );
        assert_eq!(chunk(b"hello, world!!!!!"), b"11\r\nhello, world!!!!!\r\n");
    }
}
