//! The stdio wire under the MCP server: every line the client sends is checked here before
//! rmcp sees it, so each malformed message gets the JSON-RPC 2.0 error it is owed instead of
//! silence (rmcp drops a line that is not JSON, and the client waits for good) or a misleading
//! answer (`tools/call` with array arguments came back as "method not found"):
//!
//! - not JSON: -32700, `"id": null`;
//! - JSON that is not one request, notification or response (a batch, a bare value, a bad
//!   `jsonrpc`, `id` or `method`): -32600, with the request's id where it has a usable one
//!   (a string, or an integer that fits in 64 bits) and `"id": null` where it has not;
//! - a request whose `params` are not an object, or a `tools/call` without a tool name or with
//!   `arguments` that are not an object: -32602, with its id;
//! - a line longer than [`MAX_LINE`]: -32600, `"id": null` (its id is not read).
//!
//! One writer owns stdout: rmcp's messages and these replies each go out as a whole line.

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// The longest line read (rmcp's own limit is 16 MiB; a line it would drop is answered here).
pub const MAX_LINE: usize = 8 << 20;

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const INVALID_PARAMS: i64 = -32602;

/// What to do with one line from the client.
#[derive(Debug, PartialEq)]
pub enum Screened {
    /// Hand it to rmcp.
    Forward,
    /// Nothing to do (a blank line).
    Skip,
    /// Answer it with this error response; rmcp never sees it.
    Reply(Value),
}

fn error(id: Value, code: i64, message: String) -> Screened {
    Screened::Reply(json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": code, "message": message},
    }))
}

/// Checks one line (without its newline) as JSON-RPC 2.0 and MCP want it.
pub fn screen(line: &[u8]) -> Screened {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Screened::Skip;
    }
    let value: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => return error(Value::Null, PARSE_ERROR, format!("Parse error: {e}")),
    };
    let msg = match value {
        Value::Object(m) => m,
        Value::Array(_) => {
            return error(
                Value::Null,
                INVALID_REQUEST,
                "Invalid Request: batches are not supported; send one message a line".into(),
            );
        }
        _ => {
            return error(
                Value::Null,
                INVALID_REQUEST,
                "Invalid Request: a message is a JSON object".into(),
            );
        }
    };
    // The id to answer with: the request's, when it is one a response can carry.
    let id = match msg.get("id") {
        None => None,
        Some(v @ Value::String(_)) => Some(v.clone()),
        // The server keeps an id as a 64-bit integer: any other number (1.5, 1e30) could not
        // be answered with it, so it is refused here with `"id": null`.
        Some(v @ Value::Number(n)) if n.is_i64() => Some(v.clone()),
        Some(Value::Number(n)) => {
            return error(
                Value::Null,
                INVALID_REQUEST,
                format!("Invalid Request: a numeric `id` must be a 64-bit integer, not {n}"),
            );
        }
        Some(other) => {
            return error(
                Value::Null,
                INVALID_REQUEST,
                format!("Invalid Request: `id` must be a string or a number, not {other}"),
            );
        }
    };
    let answer_id = id.clone().unwrap_or(Value::Null);
    if msg.get("jsonrpc") != Some(&Value::String("2.0".into())) {
        return error(
            answer_id,
            INVALID_REQUEST,
            "Invalid Request: `jsonrpc` must be \"2.0\"".into(),
        );
    }
    let Some(method) = msg.get("method") else {
        // A response to something the server asked.
        let one = msg.contains_key("result") != msg.contains_key("error");
        return if id.is_some() && one {
            Screened::Forward
        } else {
            error(
                answer_id,
                INVALID_REQUEST,
                "Invalid Request: no `method`, and not a response (`id` and `result` or `error`)"
                    .into(),
            )
        };
    };
    let Some(method) = method.as_str() else {
        return error(
            answer_id,
            INVALID_REQUEST,
            "Invalid Request: `method` must be a string".into(),
        );
    };
    // A notification is never answered (JSON-RPC 2.0, 4.1): rmcp deals with it.
    let Some(id) = id else {
        return Screened::Forward;
    };
    let params = msg.get("params");
    match params {
        None | Some(Value::Object(_)) => {}
        Some(other) => {
            return error(
                id,
                INVALID_PARAMS,
                format!(
                    "Invalid params: `params` of {method} must be an object, not {}",
                    kind(other)
                ),
            );
        }
    }
    if method == "tools/call" {
        let Some(Value::Object(p)) = params else {
            return error(
                id,
                INVALID_PARAMS,
                "Invalid params: tools/call needs `params` with the tool's `name`".into(),
            );
        };
        if !p.get("name").is_some_and(Value::is_string) {
            return error(
                id,
                INVALID_PARAMS,
                "Invalid params: tools/call needs the tool's `name`, a string".into(),
            );
        }
        match p.get("arguments") {
            None | Some(Value::Null) | Some(Value::Object(_)) => {}
            Some(other) => {
                return error(
                    id,
                    INVALID_PARAMS,
                    format!(
                        "Invalid params: `arguments` must be an object of named arguments, not {}",
                        kind(other)
                    ),
                );
            }
        }
    }
    Screened::Forward
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Reads the client's lines from `input`, hands the good ones to rmcp (`server`) and the
/// answers to bad ones to `replies`. Returns at the end of input, which rmcp then sees.
pub async fn read_client(
    input: impl AsyncRead + Unpin,
    mut server: impl AsyncWrite + Unpin,
    replies: mpsc::UnboundedSender<Vec<u8>>,
) {
    let mut input = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        line.clear();
        let (read, too_long) = match read_line(&mut input, &mut line).await {
            Ok(r) => r,
            Err(e) => {
                tracing::error!("mcp: reading stdin: {e}");
                break;
            }
        };
        if read == 0 {
            break;
        }
        let screened = if too_long {
            error(
                Value::Null,
                INVALID_REQUEST,
                format!(
                    "Invalid Request: a message of more than {} MiB; nothing done",
                    MAX_LINE >> 20
                ),
            )
        } else {
            screen(line.strip_suffix(b"\n").unwrap_or(&line))
        };
        match screened {
            Screened::Skip => {}
            Screened::Forward => {
                if !line.ends_with(b"\n") {
                    line.push(b'\n');
                }
                if server.write_all(&line).await.is_err() || server.flush().await.is_err() {
                    break;
                }
            }
            Screened::Reply(v) => {
                let mut bytes = v.to_string().into_bytes();
                bytes.push(b'\n');
                if replies.send(bytes).is_err() {
                    break;
                }
            }
        }
    }
    let _ = server.shutdown().await;
}

/// One line into `line` (with its newline, if any), keeping at most [`MAX_LINE`] bytes of it:
/// the rest of a longer line is read and dropped. Returns the bytes read and whether the line
/// was too long.
async fn read_line(
    input: &mut (impl tokio::io::AsyncBufRead + Unpin),
    line: &mut Vec<u8>,
) -> std::io::Result<(usize, bool)> {
    let mut total = 0;
    let mut too_long = false;
    loop {
        let available = input.fill_buf().await?;
        if available.is_empty() {
            return Ok((total, too_long));
        }
        let newline = available.iter().position(|b| *b == b'\n');
        let take = newline.map_or(available.len(), |i| i + 1);
        if !too_long && line.len() + take <= MAX_LINE {
            line.extend_from_slice(&available[..take]);
        } else {
            too_long = true;
            line.clear();
        }
        input.consume(take);
        total += take;
        if newline.is_some() {
            return Ok((total, too_long));
        }
    }
}

/// Writes whole lines to `out` as they come, from rmcp (`server`) and from the screening.
pub async fn write_out(
    server: impl AsyncRead + Unpin,
    replies: mpsc::UnboundedSender<Vec<u8>>,
    mut lines: mpsc::UnboundedReceiver<Vec<u8>>,
    mut out: impl AsyncWrite + Unpin,
) {
    // rmcp's output joins the same queue, a whole line at a time.
    let forward = async move {
        let mut server = BufReader::new(server);
        loop {
            let mut line = Vec::new();
            match server.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if replies.send(line).is_err() {
                        break;
                    }
                }
            }
        }
    };
    let write = async move {
        while let Some(line) = lines.recv().await {
            if out.write_all(&line).await.is_err() || out.flush().await.is_err() {
                break;
            }
        }
    };
    tokio::join!(forward, write);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(s: &str) -> Option<(i64, Value)> {
        match screen(s.as_bytes()) {
            Screened::Reply(v) => Some((v["error"]["code"].as_i64().unwrap(), v["id"].clone())),
            _ => None,
        }
    }

    #[test]
    fn each_malformed_message_gets_its_error() {
        assert_eq!(code("{not json"), Some((PARSE_ERROR, Value::Null)));
        assert_eq!(code("\u{FEFF}{\"a\":"), Some((PARSE_ERROR, Value::Null)));
        assert_eq!(code("[]"), Some((INVALID_REQUEST, Value::Null)));
        assert_eq!(code("42"), Some((INVALID_REQUEST, Value::Null)));
        assert_eq!(
            code(r#"{"jsonrpc":"1.0","id":3,"method":"ping"}"#),
            Some((INVALID_REQUEST, json!(3)))
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}"#),
            Some((INVALID_REQUEST, Value::Null))
        );
        for id in ["1.5", "99999999999999999999999", "1e3"] {
            let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
            assert_eq!(code(&line), Some((INVALID_REQUEST, Value::Null)), "{id}");
        }
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":-7,"method":"ping"}"#), None);
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":"a","method":7}"#),
            Some((INVALID_REQUEST, json!("a")))
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":4}"#),
            Some((INVALID_REQUEST, json!(4)))
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":5,"method":"tools/list","params":[1]}"#),
            Some((INVALID_PARAMS, json!(5)))
        );
        assert_eq!(
            code(
                r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"history","arguments":["x"]}}"#
            ),
            Some((INVALID_PARAMS, json!(6)))
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{}}"#),
            Some((INVALID_PARAMS, json!(7)))
        );
    }

    #[test]
    fn good_messages_pass() {
        for ok in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"history","arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"history"}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":2,"result":{}}"#,
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\r",
        ] {
            assert_eq!(screen(ok.as_bytes()), Screened::Forward, "{ok}");
        }
        assert_eq!(screen(b"  "), Screened::Skip);
    }
}
