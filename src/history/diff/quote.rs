//! Path quoting exactly like git's `quote_c_style` with `core.quotePath=true`.

/// What git does with one byte when quoting a path: `None` = copied as is,
/// `Some(c)` with `c >= b' '` = backslash + `c`, `Some(0)` = octal escape.
fn escape_of(b: u8) -> Option<u8> {
    match b {
        0x07 => Some(b'a'),
        0x08 => Some(b'b'),
        0x09 => Some(b't'),
        0x0a => Some(b'n'),
        0x0b => Some(b'v'),
        0x0c => Some(b'f'),
        0x0d => Some(b'r'),
        b'"' => Some(b'"'),
        b'\\' => Some(b'\\'),
        0x00..=0x1f | 0x7f..=0xff => Some(0),
        _ => None,
    }
}

/// Whether git would quote this path.
pub fn needs_quoting(path: &[u8]) -> bool {
    path.iter().any(|&b| escape_of(b).is_some())
}

fn push_escaped(out: &mut Vec<u8>, s: &[u8]) {
    for &b in s {
        match escape_of(b) {
            None => out.push(b),
            Some(0) => {
                out.push(b'\\');
                out.push(b'0' + ((b >> 6) & 3));
                out.push(b'0' + ((b >> 3) & 7));
                out.push(b'0' + (b & 7));
            }
            Some(c) => {
                out.push(b'\\');
                out.push(c);
            }
        }
    }
}

/// `quote_c_style`: the path itself when nothing needs quoting, else `"..."`
/// with C escapes (`\t`, `\"`, `\\`, octal `\303` for other bytes).
pub fn quote_path(path: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(path.len() + 2);
    if needs_quoting(path) {
        out.push(b'"');
        push_escaped(&mut out, path);
        out.push(b'"');
    } else {
        out.extend_from_slice(path);
    }
    out
}

/// `quote_two_c_style`: prefix + path, quoted as a whole if the path needs it
/// (`"a/\303\251"`).
pub fn quote_prefixed(prefix: &[u8], path: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + path.len() + 2);
    if needs_quoting(prefix) || needs_quoting(path) {
        out.push(b'"');
        push_escaped(&mut out, prefix);
        push_escaped(&mut out, path);
        out.push(b'"');
    } else {
        out.extend_from_slice(prefix);
        out.extend_from_slice(path);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_paths_are_untouched() {
        assert_eq!(quote_path(b"dir/file name.txt"), b"dir/file name.txt");
        assert_eq!(quote_prefixed(b"a/", b"x y"), b"a/x y");
    }

    #[test]
    fn special_bytes_are_escaped() {
        assert_eq!(quote_path("é".as_bytes()), b"\"\\303\\251\"");
        assert_eq!(quote_path(b"a\"b"), b"\"a\\\"b\"");
        assert_eq!(quote_path(b"a\\b"), b"\"a\\\\b\"");
        assert_eq!(quote_path(b"t\tn\nr\r"), b"\"t\\tn\\nr\\r\"");
        assert_eq!(quote_path(b"\x01\x7f\x1b"), b"\"\\001\\177\\033\"");
        assert_eq!(quote_path(b"\x07\x08\x0b\x0c"), b"\"\\a\\b\\v\\f\"");
        assert_eq!(quote_prefixed(b"b/", b"\xff"), b"\"b/\\377\"");
    }
}
