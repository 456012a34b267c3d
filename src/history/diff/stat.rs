//! `git diff --stat` layout (diff.c: show_stats, pprint_rename).

use super::quote::{needs_quoting, quote_path};
use super::xdiff::{GREEN, RED, RESET};
use super::{Options, Side, is_binary};

/// One file of a `--stat` listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    /// Path (the new path for renames).
    pub path: Vec<u8>,
    /// Old path when the file was renamed.
    pub old_path: Option<Vec<u8>>,
    /// Added lines; for binary files the new size in bytes.
    pub added: u64,
    /// Deleted lines; for binary files the old size in bytes.
    pub deleted: u64,
    /// Shown as `Bin X -> Y bytes`.
    pub binary: bool,
}

impl Stat {
    /// Compute the counts git would show for this pair (`None` = missing
    /// side). Different paths make it a rename.
    pub fn from_sides(old: Option<Side>, new: Option<Side>, opts: &Options) -> Stat {
        let path = new.or(old).map(|s| s.path.to_vec()).unwrap_or_default();
        let old_path = match (old, new) {
            (Some(o), Some(n)) if o.path != n.path => Some(o.path.to_vec()),
            _ => None,
        };
        let a = old.map_or(&b""[..], |s| s.content);
        let b = new.map_or(&b""[..], |s| s.content);
        let same = old.is_some() && new.is_some() && a == b;
        if is_binary(a) || is_binary(b) {
            let (added, deleted) = if same {
                (0, 0)
            } else {
                (b.len() as u64, a.len() as u64)
            };
            return Stat {
                path,
                old_path,
                added,
                deleted,
                binary: true,
            };
        }
        let (added, deleted) = if same {
            (0, 0)
        } else {
            super::xdiff::diff_lines(a, b, opts.indent_heuristic).counts()
        };
        Stat {
            path,
            old_path,
            added,
            deleted,
            binary: false,
        }
    }

    /// The name as the stat column shows it (quoted, renames compressed as
    /// `dir/{old => new}`).
    pub fn display_name(&self) -> Vec<u8> {
        match &self.old_path {
            Some(from) => pprint_rename(from, &self.path),
            None => quote_path(&self.path),
        }
    }
}

/// git's `pprint_rename`.
fn pprint_rename(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut name = Vec::new();
    if needs_quoting(a) || needs_quoting(b) {
        name.extend_from_slice(&quote_path(a));
        name.extend_from_slice(b" => ");
        name.extend_from_slice(&quote_path(b));
        return name;
    }
    let (len_a, len_b) = (a.len() as isize, b.len() as isize);
    let mut pfx: isize = 0;
    let mut i = 0;
    while i < a.len() && i < b.len() && a[i] == b[i] {
        if a[i] == b'/' {
            pfx = i as isize + 1;
        }
        i += 1;
    }
    // common suffix; may run one into the prefix to see its slash
    let adj = if pfx != 0 { 1 } else { 0 };
    let mut sfx: isize = 0;
    let (mut oi, mut ni) = (len_a, len_b);
    let at = |s: &[u8], k: isize| {
        if k >= 0 && (k as usize) < s.len() {
            s[k as usize]
        } else {
            0
        }
    };
    while pfx - adj <= oi && pfx - adj <= ni && at(a, oi) == at(b, ni) {
        if at(a, oi) == b'/' {
            sfx = len_a - oi;
        }
        oi -= 1;
        ni -= 1;
    }
    let a_mid = (len_a - pfx - sfx).max(0);
    let b_mid = (len_b - pfx - sfx).max(0);
    let (p, s) = (pfx as usize, sfx as usize);
    if pfx + sfx != 0 {
        name.extend_from_slice(&a[..p]);
        name.push(b'{');
    }
    name.extend_from_slice(&a[p..p + a_mid as usize]);
    name.extend_from_slice(b" => ");
    name.extend_from_slice(&b[p..p + b_mid as usize]);
    if pfx + sfx != 0 {
        name.push(b'}');
        name.extend_from_slice(&a[a.len() - s..]);
    }
    name
}

fn decimal_width(n: u64) -> i64 {
    n.to_string().len() as i64
}

fn scale_linear(it: i64, width: i64, max_change: i64) -> i64 {
    if it == 0 {
        return 0;
    }
    1 + it * (width - 1) / max_change
}

/// Display width of a name: names are ASCII once quoted, so bytes = columns
/// (falls back to the byte count like git for anything else).
fn str_width(s: &[u8]) -> i64 {
    match std::str::from_utf8(s) {
        Ok(t) => t.chars().count() as i64,
        Err(_) => s.len() as i64,
    }
}

/// `git diff --stat` output for `files` (in the order given) at a total
/// width of `width` columns (git uses the terminal width, 80 when not a
/// terminal). Empty when `files` is empty.
pub fn stat(files: &[Stat], width: usize, color: bool) -> Vec<u8> {
    let mut out = Vec::new();
    if files.is_empty() {
        return out;
    }
    let (reset, add_c, del_c): (&[u8], &[u8], &[u8]) = if color {
        (RESET, GREEN, RED)
    } else {
        (b"", b"", b"")
    };
    let names: Vec<Vec<u8>> = files.iter().map(|f| f.display_name()).collect();

    let mut max_change: i64 = 0;
    let mut max_len: i64 = 0;
    let mut bin_width: i64 = 0;
    let mut number_width: i64 = 0;
    for (f, name) in files.iter().zip(&names) {
        max_len = max_len.max(str_width(name));
        if f.binary {
            let w = 14 + decimal_width(f.added) + decimal_width(f.deleted);
            bin_width = bin_width.max(w);
            number_width = 3;
            continue;
        }
        max_change = max_change.max((f.added + f.deleted) as i64);
    }
    let mut width = width as i64;
    number_width = number_width.max(decimal_width(max_change as u64));
    if width < 16 + 6 + number_width {
        width = 16 + 6 + number_width;
    }
    let mut graph_width = if max_change + 4 > bin_width {
        max_change
    } else {
        bin_width - 4
    };
    let mut name_width = max_len;
    if name_width + number_width + 6 + graph_width > width {
        if graph_width > width * 3 / 8 - number_width - 6 {
            graph_width = width * 3 / 8 - number_width - 6;
            if graph_width < 6 {
                graph_width = 6;
            }
        }
        if name_width > width - number_width - 6 - graph_width {
            name_width = width - number_width - 6 - graph_width;
        } else {
            graph_width = width - number_width - 6 - name_width;
        }
    }

    let mut adds: u64 = 0;
    let mut dels: u64 = 0;
    for (f, full) in files.iter().zip(&names) {
        let mut prefix: &[u8] = b"";
        let mut len = name_width;
        let name_len = str_width(full);
        let mut name: &[u8] = full;
        if name_width < name_len {
            prefix = b"...";
            len -= 3;
            let skip = (name_len - len).clamp(0, name.len() as i64) as usize;
            name = &name[skip..];
            if let Some(slash) = name.iter().position(|&b| b == b'/') {
                name = &name[slash..];
            }
        }
        let padding = (len - str_width(name)).max(0) as usize;
        out.push(b' ');
        out.extend_from_slice(prefix);
        out.extend_from_slice(name);
        out.extend(std::iter::repeat_n(b' ', padding));
        out.extend_from_slice(b" | ");
        if f.binary {
            out.extend_from_slice(format!("{:>w$}", "Bin", w = number_width as usize).as_bytes());
            if f.added == 0 && f.deleted == 0 {
                out.push(b'\n');
                continue;
            }
            out.push(b' ');
            out.extend_from_slice(del_c);
            out.extend_from_slice(f.deleted.to_string().as_bytes());
            out.extend_from_slice(reset);
            out.extend_from_slice(b" -> ");
            out.extend_from_slice(add_c);
            out.extend_from_slice(f.added.to_string().as_bytes());
            out.extend_from_slice(reset);
            out.extend_from_slice(b" bytes\n");
            continue;
        }
        adds += f.added;
        dels += f.deleted;
        let (mut add, mut del) = (f.added as i64, f.deleted as i64);
        if graph_width <= max_change {
            let mut total = scale_linear(add + del, graph_width, max_change);
            if total < 2 && add != 0 && del != 0 {
                total = 2;
            }
            if add < del {
                add = scale_linear(add, graph_width, max_change);
                del = total - add;
            } else {
                del = scale_linear(del, graph_width, max_change);
                add = total - del;
            }
        }
        let total = f.added + f.deleted;
        out.extend_from_slice(format!("{:>w$}", total, w = number_width as usize).as_bytes());
        if total != 0 {
            out.push(b' ');
        }
        for (ch, cnt, c) in [(b'+', add, add_c), (b'-', del, del_c)] {
            if cnt > 0 {
                out.extend_from_slice(c);
                out.extend(std::iter::repeat_n(ch, cnt as usize));
                out.extend_from_slice(reset);
            }
        }
        out.push(b'\n');
    }
    out.extend_from_slice(summary_line(files.len() as u64, adds, dels).as_bytes());
    out
}

/// git's summary line, e.g. ` 2 files changed, 1 insertion(+), 3 deletions(-)`.
pub fn summary_line(files: u64, insertions: u64, deletions: u64) -> String {
    if files == 0 {
        return " 0 files changed\n".to_string();
    }
    let mut s = if files == 1 {
        format!(" {files} file changed")
    } else {
        format!(" {files} files changed")
    };
    if insertions != 0 || deletions == 0 {
        s.push_str(&if insertions == 1 {
            format!(", {insertions} insertion(+)")
        } else {
            format!(", {insertions} insertions(+)")
        });
    }
    if deletions != 0 || insertions == 0 {
        s.push_str(&if deletions == 1 {
            format!(", {deletions} deletion(-)")
        } else {
            format!(", {deletions} deletions(-)")
        });
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rename_compression() {
        assert_eq!(
            pprint_rename(b"a/b/c.txt", b"a/d/c.txt"),
            b"a/{b => d}/c.txt"
        );
        assert_eq!(pprint_rename(b"old.txt", b"new.txt"), b"old.txt => new.txt");
        assert_eq!(pprint_rename(b"dir/x", b"dir/y"), b"dir/{x => y}");
        assert_eq!(pprint_rename(b"x/f", b"y/f"), b"{x => y}/f");
        assert_eq!(pprint_rename(b"a/f", b"a/b/f"), b"a/{ => b}/f");
    }

    #[test]
    fn summary_wording() {
        assert_eq!(
            summary_line(1, 1, 1),
            " 1 file changed, 1 insertion(+), 1 deletion(-)\n"
        );
        assert_eq!(summary_line(2, 3, 0), " 2 files changed, 3 insertions(+)\n");
        assert_eq!(summary_line(1, 0, 2), " 1 file changed, 2 deletions(-)\n");
        assert_eq!(
            summary_line(1, 0, 0),
            " 1 file changed, 0 insertions(+), 0 deletions(-)\n"
        );
    }
}
