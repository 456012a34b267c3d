//! Small helpers for reading hook payloads (a JSON object on stdin).

use serde_json::{Map, Value};

use super::{Agent, Error};

pub struct Payload<'a> {
    pub agent: Agent,
    pub event: &'a str,
    pub map: Map<String, Value>,
}

impl<'a> Payload<'a> {
    pub fn parse(agent: Agent, event: &'a str, bytes: &[u8]) -> Result<Self, Error> {
        let err = |reason: String| Error::Payload {
            agent: agent.as_str(),
            event: event.to_string(),
            reason,
        };
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(err("empty payload".into()));
        }
        let v: Value = serde_json::from_slice(bytes).map_err(|e| err(format!("not JSON: {e}")))?;
        match v {
            Value::Object(map) => Ok(Payload { agent, event, map }),
            other => Err(err(format!("expected a JSON object, got {}", kind(&other)))),
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
