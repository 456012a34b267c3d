//! Small helpers for reading hook payloads (one JSON object on stdin).

use serde_json::{Map, Value};

use super::{Agent, Error, HookEvent};

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
            // Cut off: the agent closed its end early, or it is longer than a hook reads.
            Some(Err(e)) if e.is_eof() => Err(payload_err(
                agent,
                event,
                format!(
                    "the payload ends before its JSON does ({e}): it was cut off, or is longer \
                     than the 4 MiB a hook reads"
                ),
            )),
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

/// How one agent's hook payloads read: which of its events mean what, and the fields that
/// carry the session, prompt and tool ids. Each agent's module holds one; [`Hooks::event`]
/// reads every agent's payloads alike.
pub struct Hooks {
    /// The session id: the first of these fields that holds one.
    pub session: &'static [&'static str],
    /// The agent's own id of a prompt (turn, generation, message), if it has one.
    pub prompt_id: Option<&'static str>,
    /// The tool's name and the tool call's id, for events that name the tool by a field.
    pub tool: &'static str,
    pub tool_id: Option<&'static str>,
    /// What each event rewind acts on means; any other is ignored.
    pub events: &'static [(&'static str, Meaning)],
}

/// What a hook event means to rewind.
#[derive(Clone, Copy, Debug)]
pub enum Meaning {
    SessionStart,
    Prompt,
    ToolStart(ToolName),
    ToolEnd(ToolName),
    Stop,
    SessionEnd,
}

/// Where a tool event's tool name comes from.
#[derive(Clone, Copy, Debug)]
pub enum ToolName {
    /// The [`Hooks::tool`] field (required), with its call id from [`Hooks::tool_id`].
    Field,
    /// The field if set, else this name; no call id.
    FieldOr(&'static str),
    /// Always this name (the event says which tool); no call id.
    Fixed(&'static str),
}

impl Hooks {
    /// The event a payload reports (`Ignored` for an event not in the table).
    pub fn event(&self, p: &Payload<'_>) -> Result<HookEvent, Error> {
        let Some(&(_, meaning)) = self.events.iter().find(|(name, _)| *name == p.event) else {
            return Ok(HookEvent::Ignored);
        };
        let session_id = p.req(self.session)?;
        let tool = |name: ToolName| -> Result<(String, Option<String>), Error> {
            Ok(match name {
                ToolName::Field => (p.req(&[self.tool])?, self.tool_id.and_then(|k| p.opt(&[k]))),
                ToolName::FieldOr(default) => {
                    (p.opt(&[self.tool]).unwrap_or_else(|| default.into()), None)
                }
                ToolName::Fixed(name) => (name.into(), None),
            })
        };
        Ok(match meaning {
            Meaning::SessionStart => HookEvent::SessionStart { session_id },
            Meaning::Prompt => HookEvent::Prompt {
                session_id,
                prompt: p.req_allow_empty("prompt")?,
                prompt_id: self.prompt_id.and_then(|k| p.opt(&[k])),
            },
            Meaning::ToolStart(name) => {
                let (tool, tool_id) = tool(name)?;
                HookEvent::ToolStart {
                    session_id,
                    tool,
                    tool_id,
                }
            }
            Meaning::ToolEnd(name) => {
                let (tool, tool_id) = tool(name)?;
                HookEvent::ToolEnd {
                    session_id,
                    tool,
                    tool_id,
                }
            }
            Meaning::Stop => HookEvent::Stop { session_id },
            Meaning::SessionEnd => HookEvent::SessionEnd { session_id },
        })
    }
}
