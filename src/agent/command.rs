//! Building and recognising the shell command each hook runs.
//!
//! Every agent except OpenCode runs a hook's `command` through a shell
//! (Claude Code: `bash -c`, Codex: `$SHELL -lc`, Gemini CLI: `bash -c`,
//! Cursor: a shell string), so the rewind path is quoted for a POSIX shell.

use super::Agent;

/// Quote `s` as one POSIX shell word, as `shlex` does: unquoted when every character is safe,
/// else in single quotes, and a stretch holding a `'` in double quotes (never with `$` or a
/// backquote in them): `/a'b/$x` is `"/a'b/"'$x'`. Also valid in fish, whose quotes read those
/// the same way. A NUL, which no path or JSON reply holds and no
/// shell word can carry, is left out.
pub fn shell_quote(s: &str) -> String {
    let s = s.replace('\0', "");
    // shlex refuses only a NUL, and none is left.
    shlex::try_quote(&s)
        .map(std::borrow::Cow::into_owned)
        .unwrap_or_default()
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

/// Is `cmd` a rewind hook command for `agent` (any rewind path, any event)?
///
/// Recognised shape: `... <path whose file name contains "rewind"> hook <agent> ...`, the words
/// split as a POSIX shell would (`shlex`); a command whose quotes do not balance is not ours.
pub fn is_rewind_command(cmd: &str, agent: Agent) -> bool {
    let Some(words) = shlex::split(cmd) else {
        return false;
    };
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
        assert_eq!(shell_quote("/a'b/rewind"), "\"/a'b/rewind\"");
        assert_eq!(shell_quote("/a'b/$x"), "\"/a'b/\"'$x'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("$HOME/rewind"), "'$HOME/rewind'");
    }

    #[test]
    fn quoted_words_split_back_unchanged() {
        for p in [
            "/usr/bin/rewind",
            "/opt/my tools/rewind",
            "/a'b/re wind",
            "x\"y$z",
            "/opt/a=b,c%d/rewind",
            "it's \\ \"$HOME\" `x`",
        ] {
            let cmd = format!("{} hook claude Stop || true", shell_quote(p));
            let w = shlex::split(&cmd).unwrap();
            assert_eq!(w, vec![p, "hook", "claude", "Stop", "||", "true"]);
        }
        assert_eq!(shell_quote("a\0b"), "ab");
    }

    #[test]
    fn a_real_shell_reads_each_quoted_word_back() {
        let words = [
            "/opt/my tools/rewind",
            "/a'b/re wind",
            "it's \\ \"$HOME\" `x` $(y) !z *",
            "/opt/a=b,c%d/{e}/rewind",
            "{\"continue\": true, \"why\": \"it's\"}",
        ];
        for shell in ["sh", "bash"] {
            for w in words {
                let out = std::process::Command::new(shell)
                    .arg("-c")
                    .arg(format!("printf '%s' {}", shell_quote(w)))
                    .output()
                    .unwrap();
                assert_eq!(String::from_utf8_lossy(&out.stdout), w, "{shell}");
            }
        }
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
