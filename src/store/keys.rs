//! Key encoding. Fixed-width big-endian integers so that RocksDB's byte order is numeric order,
//! and NUL-terminated names (NUL cannot occur in a path or a validated name) so that a prefix
//! scan of one name never runs into another that merely starts with it.

/// `changes`: the change id.
pub fn change(id: u64) -> [u8; 8] {
    id.to_be_bytes()
}

/// `by_path`, `by_session`, `by_agent`: `name NUL id`.
pub fn named(name: &[u8], id: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(name.len() + 9);
    key.extend_from_slice(name);
    key.push(0);
    key.extend_from_slice(&id.to_be_bytes());
    key
}

/// The prefix under which every [`named`] key of `name` sorts.
pub fn named_prefix(name: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(name.len() + 1);
    key.extend_from_slice(name);
    key.push(0);
    key
}

/// `by_time`: `time_ns id`.
pub fn time(time_ns: u64, id: u64) -> [u8; 16] {
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&time_ns.to_be_bytes());
    key[8..].copy_from_slice(&id.to_be_bytes());
    key
}

/// `meta`: the tombstone of a retracted change.
pub fn retracted(id: u64) -> Vec<u8> {
    named(b"retracted", id)
}

/// The id at the end of a `named` or `time` key.
pub fn trailing_id(key: &[u8]) -> Option<u64> {
    let tail: [u8; 8] = key.get(key.len().checked_sub(8)?..)?.try_into().ok()?;
    Some(u64::from_be_bytes(tail))
}

/// Decode a `changes` key.
pub fn change_id(key: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(key.try_into().ok()?))
}

/// The name part of a `named` key.
pub fn name_of(key: &[u8]) -> Option<&[u8]> {
    let end = key.len().checked_sub(9)?;
    (key[end] == 0).then(|| &key[..end])
}

pub fn hex(key: &[u8]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_sort_numerically() {
        let ids = [0u64, 1, 255, 256, 65_535, 1 << 40, u64::MAX];
        for pair in ids.windows(2) {
            assert!(change(pair[0]) < change(pair[1]));
            assert!(named(b"a", pair[0]) < named(b"a", pair[1]));
            assert!(time(7, pair[0]) < time(7, pair[1]));
        }
    }

    #[test]
    fn named_keys_round_trip_and_do_not_bleed_into_longer_names() {
        for id in [0u64, 42, u64::MAX] {
            let key = named(b"src/main.rs", id);
            assert_eq!(trailing_id(&key), Some(id));
            assert_eq!(name_of(&key), Some(&b"src/main.rs"[..]));
            assert!(key.starts_with(&named_prefix(b"src/main.rs")));
            assert!(!key.starts_with(&named_prefix(b"src/main")));
        }
        // "a" with every id sorts before "a/b" and "a0", so a prefix scan of "a" stops in time.
        assert!(named(b"a", u64::MAX) < named(b"a/b", 0));
        assert!(named(b"a", u64::MAX) < named(b"a0", 0));
    }

    #[test]
    fn time_keys_order_by_time_then_id() {
        assert!(time(1, 9) < time(2, 0));
        assert_eq!(trailing_id(&time(5, 77)), Some(77));
        assert_eq!(change_id(&change(12)), Some(12));
        assert_eq!(change_id(b"short"), None);
        assert_eq!(name_of(b"x"), None);
    }
}
