//! A stdio server's output, one JSON-RPC message a line, held to [`MAX_MESSAGE_BYTES`]. A
//! longer line is not buffered: it is read through and dropped, and when it was a reply to one
//! of keel's requests (it has an `id` and no `method`) keel's side reads, in its place, an error
//! reply to that request saying the reply was too large ([`is_too_large`]). Without it the
//! reply was dropped unseen and the call waited out its timeout, to be reported as a server that
//! did not answer and tried again.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, ReadBuf};

/// The longest message a server may send: 16 MiB, as MCP's HTTP transport allows.
pub(crate) const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// The JSON-RPC error code of the stand-in reply (the implementation-defined server range).
const TOO_LARGE_CODE: i32 = -32_099;

/// What the stand-in reply's `data.keel` says.
const TOO_LARGE: &str = "reply_too_large";

/// Whether `error` is the stand-in for a reply over [`MAX_MESSAGE_BYTES`].
pub(crate) fn is_too_large(error: &rmcp::model::ErrorData) -> bool {
    error.code.0 == TOO_LARGE_CODE
        && error
            .data
            .as_ref()
            .and_then(|data| data.get("keel"))
            .is_some_and(|keel| keel == TOO_LARGE)
}

/// Reads `inner` line by line, each line at most `max` bytes (see the module).
pub(crate) struct CappedLines<R> {
    inner: R,
    max: usize,
    /// The line being read, while it is within `max`.
    line: Vec<u8>,
    /// The bytes of the line being read once it went over `max` (0: it has not).
    over: usize,
    scan: Scan,
    /// Whole lines ready to be read, from `done` on.
    ready: Vec<u8>,
    done: usize,
    chunk: Box<[u8]>,
    eof: bool,
}

impl<R> CappedLines<R> {
    /// `inner` held to lines of `max` bytes.
    pub(crate) fn new(inner: R, max: usize) -> Self {
        CappedLines {
            inner,
            max,
            line: Vec::new(),
            over: 0,
            scan: Scan::default(),
            ready: Vec::new(),
            done: 0,
            chunk: vec![0; 64 * 1024].into_boxed_slice(),
            eof: false,
        }
    }

    fn push(&mut self, byte: u8) {
        if byte == b'\n' {
            if self.over > 0 {
                if let Some(reply) = self.scan.too_large_reply(self.over) {
                    self.ready.extend_from_slice(reply.as_bytes());
                    self.ready.push(b'\n');
                }
            } else {
                self.ready.append(&mut self.line);
                self.ready.push(b'\n');
            }
            self.line.clear();
            self.over = 0;
            self.scan = Scan::default();
            return;
        }
        self.scan.feed(byte);
        if self.over > 0 {
            self.over += 1;
            return;
        }
        self.line.push(byte);
        if self.line.len() > self.max {
            self.over = self.line.len();
            self.line = Vec::new();
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for CappedLines<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.done < this.ready.len() {
                let n = buf.remaining().min(this.ready.len() - this.done);
                buf.put_slice(&this.ready[this.done..this.done + n]);
                this.done += n;
                if this.done == this.ready.len() {
                    this.ready.clear();
                    this.done = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                // The last line, without its newline, as it came (the reader decides).
                if this.over == 0 && !this.line.is_empty() {
                    this.ready.append(&mut this.line);
                    continue;
                }
                return Poll::Ready(Ok(()));
            }
            let mut read = ReadBuf::new(&mut this.chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            let n = read.filled().len();
            if n == 0 {
                this.eof = true;
                continue;
            }
            for i in 0..n {
                let byte = this.chunk[i];
                this.push(byte);
            }
        }
    }
}

/// Reads one JSON-RPC message a byte at a time, keeping only its top-level `id` (as JSON
/// text) and whether it has a top-level `method` (a request or a notification, not a reply).
#[derive(Default)]
struct Scan {
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// The top-level string being read (its first bytes), which may be a key.
    string: Option<Vec<u8>>,
    /// The top-level string just read, a key when a `:` follows.
    last: Option<Vec<u8>>,
    /// Reading the value of `id`: its text so far.
    value: Option<Vec<u8>>,
    id: Option<String>,
    method: bool,
}

/// Bytes kept of a top-level string: enough to tell `id` and `method`.
const KEY_BYTES: usize = 8;
/// The longest `id` kept.
const ID_BYTES: usize = 256;

impl Scan {
    fn feed(&mut self, byte: u8) {
        if let Some(value) = &mut self.value {
            let in_string = value.first() == Some(&b'"');
            if value.is_empty() && byte.is_ascii_whitespace() {
                return;
            }
            if in_string || value.is_empty() && byte == b'"' {
                let closes = in_string && !self.escaped && byte == b'"' && !value.is_empty();
                self.escaped = in_string && !self.escaped && byte == b'\\';
                value.push(byte);
                if closes {
                    self.finish_value();
                } else if value.len() > ID_BYTES {
                    self.value = None;
                }
                return;
            }
            if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'+' | b'.') {
                value.push(byte);
                if value.len() > ID_BYTES {
                    self.value = None;
                }
                return;
            }
            self.finish_value();
        }
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if byte == b'\\' {
                self.escaped = true;
            } else if byte == b'"' {
                self.in_string = false;
                self.last = self.string.take();
                return;
            }
            if let Some(string) = &mut self.string
                && string.len() < KEY_BYTES
            {
                string.push(byte);
            }
            return;
        }
        match byte {
            b'"' => {
                self.in_string = true;
                self.string = (self.depth == 1).then(Vec::new);
                self.last = None;
            }
            b':' => {
                match self.last.take().as_deref() {
                    Some(b"id") if self.depth == 1 => self.value = Some(Vec::new()),
                    Some(b"method") if self.depth == 1 => self.method = true,
                    _ => {}
                }
                return;
            }
            b'{' | b'[' => self.depth += 1,
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            _ if byte.is_ascii_whitespace() => return,
            _ => {}
        }
        self.last = None;
    }

    fn finish_value(&mut self) {
        self.escaped = false;
        if let Some(value) = self.value.take() {
            self.id = String::from_utf8(value).ok();
        }
    }

    /// The error reply that stands in for a reply of `bytes` bytes, or `None` when the message
    /// was not a reply (it has a `method`) or its `id` was not found.
    fn too_large_reply(&mut self, bytes: usize) -> Option<String> {
        self.finish_value();
        if self.method {
            return None;
        }
        let id: serde_json::Value = serde_json::from_str(self.id.as_deref()?).ok()?;
        if !(id.is_string() || id.is_number()) {
            return None;
        }
        let reply = serde_json::json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {
                "code": TOO_LARGE_CODE,
                "message": format!(
                    "the reply was larger than keel takes ({} MiB) and was dropped",
                    MAX_MESSAGE_BYTES / (1024 * 1024)
                ),
                "data": {"keel": TOO_LARGE, "bytes": bytes},
            }
        });
        Some(reply.to_string())
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    async fn through(input: &[u8], max: usize) -> String {
        let mut out = Vec::new();
        CappedLines::new(input, max)
            .read_to_end(&mut out)
            .await
            .unwrap();
        String::from_utf8(out).unwrap()
    }

    #[tokio::test]
    async fn lines_within_the_cap_pass_as_they_are() {
        let input = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\nnot json\n{\"last\":1}";
        assert_eq!(through(input.as_bytes(), 64).await, input);
    }

    #[tokio::test]
    async fn a_reply_over_the_cap_becomes_an_error_reply_to_its_request() {
        let big = "x".repeat(200);
        for (line, id) in [
            (
                format!(r#"{{"jsonrpc":"2.0","id":7,"result":{{"text":"{big}"}}}}"#),
                json_id(7),
            ),
            // The id last, after nested `id` keys and strings that look like keys.
            (
                format!(
                    r#"{{"result":{{"id":99,"content":[{{"text":"\"id\":5 {big}"}}]}},"jsonrpc":"2.0","id" : "req-\"3\""}}"#
                ),
                serde_json::json!("req-\"3\""),
            ),
        ] {
            let out = through(format!("{line}\n{{\"after\":1}}\n").as_bytes(), 100).await;
            let mut lines = out.lines();
            let reply: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
            assert_eq!(reply["id"], id, "{out}");
            let error: rmcp::model::ErrorData =
                serde_json::from_value(reply["error"].clone()).unwrap();
            assert!(is_too_large(&error), "{error:?}");
            assert_eq!(reply["error"]["data"]["bytes"], line.len());
            assert_eq!(
                lines.next(),
                Some("{\"after\":1}"),
                "the next line is whole"
            );
        }
    }

    fn json_id(id: u64) -> serde_json::Value {
        serde_json::json!(id)
    }

    #[tokio::test]
    async fn a_request_or_a_message_without_an_id_over_the_cap_is_dropped() {
        let big = "x".repeat(200);
        for line in [
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"sampling","params":"{big}"}}"#),
            format!(r#"{{"jsonrpc":"2.0","method":"notify","params":"{big}"}}"#),
            format!(r#"{{"result":"{big}"}}"#),
            "y".repeat(300),
        ] {
            assert_eq!(
                through(format!("{line}\nok\n").as_bytes(), 100).await,
                "ok\n"
            );
        }
    }
}
