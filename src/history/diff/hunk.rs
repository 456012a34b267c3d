//! One hunk of a git-format diff, read back from the diff as printed, and put back in a file
//! as it is now: what `rewind rollback --hunk` does.
//!
//! The hunks are parsed from the very bytes `rewind diff` prints for a file, so "hunk K" is the
//! K-th `@@` the user saw. Reverting one looks for the hunk's new side (its context and added
//! lines, byte for byte, line ends included) in the file as it is now, nearest to where the
//! diff put it (the file may have shifted, as `patch` allows with an offset), and replaces it
//! with the old side. There is no fuzz: if any of those lines changed, the hunk is not found
//! and nothing is touched.

/// One `@@` hunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hunk {
    /// The `@@ -a,b +c,d @@ ...` line, without its newline.
    pub header: Vec<u8>,
    /// Where the new side starts in the file the diff was made to (1-based; 0 when empty).
    pub new_start: usize,
    /// Its lines: `b' '`, `b'-'` or `b'+'`, and the line's bytes with its newline (none for a
    /// last line that has none).
    pub lines: Vec<(u8, Vec<u8>)>,
}

impl Hunk {
    /// The lines the file had before (context and removed lines).
    pub fn old_side(&self) -> Vec<&[u8]> {
        self.side(b'-')
    }

    /// The lines the file had after (context and added lines).
    pub fn new_side(&self) -> Vec<&[u8]> {
        self.side(b'+')
    }

    fn side(&self, sign: u8) -> Vec<&[u8]> {
        self.lines
            .iter()
            .filter(|(s, _)| *s == b' ' || *s == sign)
            .map(|(_, l)| l.as_slice())
            .collect()
    }
}

/// The hunks of one file's diff as `file_diff` prints it (without colour). Header lines
/// before the first `@@` are skipped; a `\ No newline at end of file` takes the newline off
/// the line before it.
pub fn parse(diff: &[u8]) -> Vec<Hunk> {
    let mut hunks: Vec<Hunk> = Vec::new();
    for raw in diff.split_inclusive(|b| *b == b'\n') {
        let line = raw.strip_suffix(b"\n").unwrap_or(raw);
        if line.starts_with(b"@@ ") {
            hunks.push(Hunk {
                header: line.to_vec(),
                new_start: new_start(line).unwrap_or(0),
                lines: Vec::new(),
            });
            continue;
        }
        let Some(hunk) = hunks.last_mut() else {
            continue;
        };
        match line.first() {
            Some(sign @ (b' ' | b'-' | b'+')) => hunk.lines.push((*sign, raw[1..].to_vec())),
            Some(b'\\') => {
                if let Some((_, last)) = hunk.lines.last_mut()
                    && last.last() == Some(&b'\n')
                {
                    last.pop();
                }
            }
            _ => {}
        }
    }
    hunks
}

/// `c` in `@@ -a,b +c,d @@`.
fn new_start(header: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(header).ok()?;
    let plus = text.split_whitespace().nth(2)?.strip_prefix('+')?;
    plus.split(',').next()?.parse().ok()
}

/// A file's lines, each with its newline (the last may have none).
pub fn lines(content: &[u8]) -> Vec<&[u8]> {
    content.split_inclusive(|b| *b == b'\n').collect()
}

/// Where a hunk was found in the file now, and what reverting it makes of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reverted {
    /// The first line of the hunk's new side in the file now (0-based).
    pub at: usize,
    /// How far that is from where the diff put it (lines; positive: further down).
    pub offset: isize,
    /// The file with the hunk's new side replaced by its old side.
    pub content: Vec<u8>,
    /// The reverse hunk, in the file's lines now, as a unified diff hunk.
    pub patch: Vec<u8>,
}

/// Revert `hunk` in `current`, if its new side is still there unchanged. The match nearest to
/// where the diff put it wins (the one above first, at equal distance, as `patch` tries).
pub fn revert(current: &[u8], hunk: &Hunk) -> Option<Reverted> {
    let file = lines(current);
    let new = hunk.new_side();
    let expected = hunk.new_start.saturating_sub(1);
    let at = if new.is_empty() {
        // A hunk with no new side at all: the file was made empty; only an empty file is still
        // that file.
        file.is_empty().then_some(0)?
    } else {
        let fits = |at: usize| at + new.len() <= file.len() && file[at..at + new.len()] == new[..];
        let last = file.len().checked_sub(new.len())?;
        (0..=last.max(expected))
            .flat_map(|d| [expected.checked_sub(d), expected.checked_add(d)])
            .flatten()
            .find(|&at| at <= last && fits(at))?
    };
    let old = hunk.old_side();
    let mut content = Vec::with_capacity(current.len());
    for l in &file[..at] {
        content.extend_from_slice(l);
    }
    for l in &old {
        content.extend_from_slice(l);
    }
    for l in &file[at + new.len()..] {
        content.extend_from_slice(l);
    }
    Some(Reverted {
        at,
        offset: at as isize - expected as isize,
        patch: reverse_patch(hunk, at),
        content,
    })
}

/// The hunk turned around (what reverting it does to the file now, starting at line `at`):
/// its added lines are removed and its removed lines added, each run of changes listing the
/// removals first, as git does.
fn reverse_patch(hunk: &Hunk, at: usize) -> Vec<u8> {
    let (old_len, new_len) = (hunk.new_side().len(), hunk.old_side().len());
    let range = |start: usize, len: usize| match len {
        0 => format!("{start},0"),
        1 => format!("{}", start + 1),
        n => format!("{},{n}", start + 1),
    };
    let mut out = format!("@@ -{} +{} @@\n", range(at, old_len), range(at, new_len)).into_bytes();
    let mut push = |sign: u8, line: &[u8]| {
        out.push(sign);
        out.extend_from_slice(line);
        if line.last() != Some(&b'\n') {
            out.extend_from_slice(b"\n\\ No newline at end of file\n");
        }
    };
    let mut i = 0;
    while i < hunk.lines.len() {
        if hunk.lines[i].0 == b' ' {
            push(b' ', &hunk.lines[i].1);
            i += 1;
            continue;
        }
        let end = hunk.lines[i..]
            .iter()
            .position(|(s, _)| *s == b' ')
            .map_or(hunk.lines.len(), |n| i + n);
        let run = &hunk.lines[i..end];
        for (_, l) in run.iter().filter(|(s, _)| *s == b'+') {
            push(b'-', l);
        }
        for (_, l) in run.iter().filter(|(s, _)| *s == b'-') {
            push(b'+', l);
        }
        i = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::{Options, Side, file_diff};
    use super::*;

    fn diff(a: &[u8], b: &[u8]) -> Vec<u8> {
        let side = |content| Side {
            path: b"f",
            mode: 0o100644,
            content,
        };
        file_diff(Some(side(a)), Some(side(b)), &Options::default())
    }

    fn numbered(n: usize) -> String {
        (1..=n).map(|i| format!("line {i}\n")).collect()
    }

    #[test]
    fn each_hunk_reverts_alone_and_the_others_stay() {
        let before = numbered(40);
        let after = before
            .replace("line 3\n", "LINE 3\n")
            .replace("line 20\n", "line 20\nnew 20b\n")
            .replace("line 35\n", "");
        let hunks = parse(&diff(before.as_bytes(), after.as_bytes()));
        assert_eq!(hunks.len(), 3);
        let r = revert(after.as_bytes(), &hunks[1]).unwrap();
        let want = before
            .replace("line 3\n", "LINE 3\n")
            .replace("line 35\n", "");
        assert_eq!(String::from_utf8(r.content).unwrap(), want);
        assert_eq!(r.offset, 0);
        assert_eq!(
            String::from_utf8(r.patch).unwrap(),
            "@@ -18,7 +18,6 @@\n line 18\n line 19\n line 20\n-new 20b\n line 21\n line 22\n line 23\n"
        );
    }

    #[test]
    fn a_shifted_file_is_found_at_an_offset_and_a_changed_line_is_not() {
        let before = numbered(20);
        let after = before.replace("line 10\n", "ten\n");
        let hunk = &parse(&diff(before.as_bytes(), after.as_bytes()))[0];
        let shifted = format!("zero\nzero again\n{after}");
        let r = revert(shifted.as_bytes(), hunk).unwrap();
        assert_eq!(r.offset, 2);
        assert_eq!(
            String::from_utf8(r.content).unwrap(),
            format!("zero\nzero again\n{before}")
        );
        assert!(r.patch.starts_with(b"@@ -9,7 +9,7 @@\n"));
        // The added line, or a context line, edited since: not found.
        for edited in [
            after.replace("ten\n", "TEN\n"),
            after.replace("line 8\n", "eight\n"),
        ] {
            assert_eq!(revert(edited.as_bytes(), hunk), None);
        }
    }

    #[test]
    fn missing_newlines_are_part_of_the_lines() {
        let hunk = &parse(&diff(b"a\nb\nc", b"a\nb\nC"))[0];
        assert_eq!(hunk.new_side(), [&b"a\n"[..], b"b\n", b"C"]);
        let r = revert(b"a\nb\nC", hunk).unwrap();
        assert_eq!(r.content, b"a\nb\nc");
        assert_eq!(
            String::from_utf8(r.patch).unwrap(),
            "@@ -1,3 +1,3 @@\n a\n b\n-C\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n"
        );
        // `C` followed by more is another line than the last `C`.
        assert_eq!(revert(b"a\nb\nC\nd\n", hunk), None);
    }

    #[test]
    fn a_created_file_reverts_to_empty_and_an_emptied_one_only_while_empty() {
        let side = |content| Side {
            path: b"f",
            mode: 0o100644,
            content,
        };
        let opts = Options::default();
        let created = &parse(&file_diff(None, Some(side(b"x\ny\n")), &opts))[0];
        assert_eq!(revert(b"x\ny\n", created).unwrap().content, b"");
        let emptied = &parse(&diff(b"x\ny\n", b""))[0];
        assert_eq!(revert(b"", emptied).unwrap().content, b"x\ny\n");
        assert_eq!(revert(b"z\n", emptied), None);
    }

    #[test]
    fn the_nearest_match_wins() {
        let spacer = "s\n".repeat(8);
        let before = format!("a\nb\nX\nc\nd\n{spacer}").repeat(3);
        let after = format!("a\nb\nY\nc\nd\n{spacer}").repeat(3);
        let hunks = parse(&diff(before.as_bytes(), after.as_bytes()));
        assert_eq!(hunks.len(), 3);
        let last = hunks.last().unwrap();
        let r = revert(after.as_bytes(), last).unwrap();
        assert_eq!(r.offset, 0);
        assert_eq!(
            String::from_utf8(r.content).unwrap(),
            format!(
                "{}a\nb\nX\nc\nd\n{spacer}",
                format!("a\nb\nY\nc\nd\n{spacer}").repeat(2)
            )
        );
    }
}
