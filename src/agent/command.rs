//! Building and recognising the shell command each hook runs.
//!
//! Every agent except OpenCode runs a hook's `command` through a shell
//! (Claude Code: `bash -c`, Codex: `$SHELL -lc`, Gemini CLI: `bash -c`,
//! Cursor: a shell string), so the rewind path is quoted for a POSIX shell.

use super::Agent;

/// Characters that never need quoting in a POSIX shell word.
fn is_safe(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c)
}

/// Quote `s` as one POSIX shell word (single quotes, `'\''` for embedded quotes).
/// Also valid in fish, whose single quotes treat `\'` outside quotes the same way.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty() && s.chars().all(is_safe) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

/// The exact command string written into the agent's hook config for `event`.
///
/// The suffix guarantees exit status 0 even when the rewind binary is missing or
/// refuses its arguments (clap exits 2 on a usage error, and exit 2 means "block"
/// to Claude Code, Codex, Gemini CLI and Cursor):
/// * Claude Code, Codex: `|| true` (empty stdout is a no-op for both).
/// * Gemini CLI: `2>/dev/null || true`; Gemini parses *stderr* when stdout is empty
///   and treats any exit code other than 0/1 as a deny.
/// * Cursor: `|| echo '<reply>'` so Cursor still gets valid JSON.
pub fn hook_command(agent: Agent, rewind: &str, event: &str) -> String {
    let base = format!("{} hook {} {}", shell_quote(rewind), agent.as_str(), event);
    match agent {
        Agent::Claude | Agent::Codex => format!("{base} || true"),
        Agent::Gemini => format!("{base} 2>/dev/null || true"),
        Agent::Cursor => {
            let reply = super::reply(agent, event).unwrap_or_else(|| "{}".to_string());
            format!("{base} || echo {}", shell_quote(&reply))
        }
        // OpenCode has no command; the plugin spawns rewind itself. This string
        // is only used for documentation.
        Agent::Opencode => base,
    }
}

/// Split a command line into words the way a POSIX shell would for simple
/// quoting (single quotes, double quotes, backslash). Operators are not
/// special-cased: `a||b` stays one word, `a || b` gives `||` as its own word.
pub fn split_words(cmd: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = cmd.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    cur.push(c);
                }
            }
            '"' => {
                in_word = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => {
                            if let Some(n) = chars.next() {
                                if !matches!(n, '"' | '\\' | '$' | '`') {
                                    cur.push('\\');
                                }
                                cur.push(n);
                            }
                        }
                        _ => cur.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            ';' | '&' | '|' => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
                words.push(c.to_string());
            }
            _ => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    words
}

/// Is `cmd` a rewind hook command for `agent` (any rewind path, any event)?
///
/// Recognised shape: `... <path whose file name contains "rewind"> hook <agent> ...`.
pub fn is_rewind_command(cmd: &str, agent: Agent) -> bool {
    let words = split_words(cmd);
    words.windows(3).any(|w| {
        w[1] == "hook" && w[2] == agent.as_str() && {
            let name = w[0].rsplit(['/', '\\']).next().unwrap_or("");
            name.to_ascii_lowercase().contains("rewind")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("/usr/bin/rewind"), "/usr/bin/rewind");
        assert_eq!(
            shell_quote("/opt/my tools/rewind"),
            "'/opt/my tools/rewind'"
        );
        assert_eq!(shell_quote("/a'b/rewind"), "'/a'\\''b/rewind'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("$HOME/rewind"), "'$HOME/rewind'");
    }

    #[test]
    fn split_roundtrips_quoting() {
        for p in [
            "/usr/bin/rewind",
            "/opt/my tools/rewind",
            "/a'b/re wind",
            "x\"y$z",
        ] {
            let cmd = format!("{} hook claude Stop || true", shell_quote(p));
            let w = split_words(&cmd);
            assert_eq!(w, vec![p, "hook", "claude", "Stop", "|", "|", "true"]);
        }
        assert_eq!(
            split_words(r#"a "b \" c" 'd e'"#),
            vec!["a", "b \" c", "d e"]
        );
    }

    #[test]
    fn recognise() {
        for agent in Agent::ALL {
            for p in [
                "/usr/bin/rewind",
                "/opt/my tools/rewind-dev",
                "rewind",
                "C:\\bin\\rewind.exe",
            ] {
                let cmd = hook_command(agent, p, "Stop");
                assert!(is_rewind_command(&cmd, agent), "{cmd}");
                for other in Agent::ALL {
                    if other != agent {
                        assert!(!is_rewind_command(&cmd, other), "{cmd} / {other}");
                    }
                }
            }
        }
        assert!(!is_rewind_command("echo hook claude", Agent::Claude));
        assert!(!is_rewind_command("./format.sh", Agent::Cursor));
        assert!(!is_rewind_command("rewind hooks claude x", Agent::Claude));
        assert!(is_rewind_command(
            "cd x && ~/bin/rewind hook gemini AfterTool",
            Agent::Gemini
        ));
    }
}
