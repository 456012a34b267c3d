//! Small helpers for reading hook payloads (one JSON object on stdin).

use serde_json::{Map, Value};

use super::{Agent, Error};

pub struct Payload<'a> {
    pub agent: Agent,
    pub event: &'a str,
    pub map: Map<String, Value>,
}

impl<'a> Payload<'a> {
    pub fn parse(agent: Agent, event: &'a str, bytes: &[u8]) -> Result<Self, Error> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(payload_err(agent, event, "empty payload".into()));
        }
        let v: Value = serde_json::from_slice(bytes)
            .map_err(|e| payload_err(agent, event, format!("not JSON: {e}")))?;
        Self::from_value(agent, event, v)
    }

    /// Read one JSON value from `input` and stop at its end: an agent may keep its end of the
    /// pipe open after the payload, and waiting for the end of input would wait for good.
    pub fn read(agent: Agent, event: &'a str, input: impl std::io::Read) -> Result<Self, Error> {
        let mut values = serde_json::Deserializer::from_reader(input).into_iter::<Value>();
        match values.next() {
            None => Err(payload_err(agent, event, "empty payload".into())),
            Some(Err(e)) => Err(payload_err(agent, event, format!("not JSON: {e}"))),
            Some(Ok(v)) => Self::from_value(agent, event, v),
        }
    }

    fn from_value(agent: Agent, event: &'a str, v: Value) -> Result<Self, Error> {
        match v {
            Value::Object(map) => Ok(Payload { agent, event, map }),
            other => Err(payload_err(
                agent,
                event,
                format!("expected a JSON object, got {}", kind(&other)),
            )),
        }
    }

    pub fn err(&self, reason: impl Into<String>) -> Error {
        Error::Payload {
            agent: self.agent.as_str(),
            event: self.event.to_string(),
            reason: reason.into(),
        }
    }

    /// First of `keys` that holds a non-empty string.
    pub fn opt(&self, keys: &[&str]) -> Option<String> {
        keys.iter()
            .filter_map(|k| self.map.get(*k))
            .filter_map(Value::as_str)
            .find(|s| !s.is_empty())
            .map(str::to_string)
    }

    /// Like [`Self::opt`] but the field is required.
    pub fn req(&self, keys: &[&str]) -> Result<String, Error> {
        self.opt(keys).ok_or_else(|| {
            self.err(format!(
                "missing or empty string field {}",
                keys.join(" / ")
            ))
        })
    }

    /// A string field that must be present but may be empty (a prompt).
    pub fn req_allow_empty(&self, key: &str) -> Result<String, Error> {
        match self.map.get(key) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => {
                Err(self.err(format!("field {key} is {}, expected a string", kind(other))))
            }
            None => Err(self.err(format!("missing field {key}"))),
        }
    }

    pub fn has(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }
}

fn payload_err(agent: Agent, event: &str, reason: String) -> Error {
    Error::Payload {
        agent: agent.as_str(),
        event: event.to_string(),
        reason,
    }
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
