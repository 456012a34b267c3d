//! How output looks: changes (from `history::format`), unified diffs, colour.

pub use crate::history::format::{change_json, change_line};

/// Whether to colour output: stdout is a terminal and NO_COLOR is unset.
pub fn color() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stdout()) && std::env::var_os("NO_COLOR").is_none()
}

fn is_binary(data: &[u8]) -> bool {
    data.iter().take(8000).any(|b| *b == 0) || std::str::from_utf8(data).is_err()
}

/// A unified diff of one path, as `git diff` shows it. `None` means the path did not exist.
pub fn unified(path: &str, old: Option<&[u8]>, new: Option<&[u8]>, color: bool) -> String {
    let (a, b) = (
        if old.is_some() {
            format!("a/{path}")
        } else {
            "/dev/null".into()
        },
        if new.is_some() {
            format!("b/{path}")
        } else {
            "/dev/null".into()
        },
    );
    let paint = |code: &str, line: &str| {
        if color {
            format!("\x1b[{code}m{line}\x1b[0m")
        } else {
            line.to_string()
        }
    };
    let mut out = paint("1", &format!("diff --rewind a/{path} b/{path}")) + "\n";
    let (old_b, new_b) = (old.unwrap_or_default(), new.unwrap_or_default());
    if is_binary(old_b) || is_binary(new_b) {
        if old_b != new_b {
            out += &format!("Binary files {a} and {b} differ\n");
        }
        return out;
    }
    let (old_s, new_s) = (
        std::str::from_utf8(old_b).unwrap_or_default(),
        std::str::from_utf8(new_b).unwrap_or_default(),
    );
    let diff = similar::TextDiff::from_lines(old_s, new_s);
    let text = diff
        .unified_diff()
        .context_radius(3)
        .header(&a, &b)
        .to_string();
    for line in text.lines() {
        let painted = if line.starts_with("---") || line.starts_with("+++") {
            paint("1", line)
        } else if line.starts_with("@@") {
            paint("36", line)
        } else if line.starts_with('-') {
            paint("31", line)
        } else if line.starts_with('+') {
            paint("32", line)
        } else {
            line.to_string()
        };
        out += &painted;
        out.push('\n');
    }
    out
}

/// `path | 12 +++++-------` as `git diff --stat` shows it.
pub fn stat_line(path: &str, old: Option<&[u8]>, new: Option<&[u8]>) -> (String, usize, usize) {
    let (old_b, new_b) = (old.unwrap_or_default(), new.unwrap_or_default());
    if is_binary(old_b) || is_binary(new_b) {
        return (
            format!(" {path} | Bin {} -> {} bytes", old_b.len(), new_b.len()),
            0,
            0,
        );
    }
    let diff = similar::TextDiff::from_lines(
        std::str::from_utf8(old_b).unwrap_or_default(),
        std::str::from_utf8(new_b).unwrap_or_default(),
    );
    let (mut ins, mut del) = (0, 0);
    for c in diff.iter_all_changes() {
        match c.tag() {
            similar::ChangeTag::Insert => ins += 1,
            similar::ChangeTag::Delete => del += 1,
            similar::ChangeTag::Equal => {}
        }
    }
    let bar = "+".repeat(ins.min(40)) + &"-".repeat(del.min(40));
    (format!(" {path} | {} {bar}", ins + del), ins, del)
}
