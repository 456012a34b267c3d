//! The persisted bytes of every record kind, pinned. The expected values were worked out by
//! hand (a small postcard encoder outside this crate, in `docs/design.md`'s terms: varints,
//! length-prefixed bytes, `0`/`1` option tags), so a change to any record's layout fails here
//! before it can change what old stores mean.

use super::*;
use crate::store::blobs;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn hash() -> [u8; 32] {
    std::array::from_fn(|i| i as u8)
}

fn state() -> v1::StateRecord {
    v1::StateRecord {
        kind: kind::FILE,
        size: 12,
        mode: 0o644,
        hash: Some(hash()),
    }
}

/// The same state as version 3 keeps it: owned by uid 1000, gid 100.
fn owned_state() -> StateRecord {
    StateRecord {
        owner: Some((1000, 100)),
        ..StateRecord::from(state())
    }
}

fn v1_change() -> v1::ChangeRecord {
    v1::ChangeRecord {
        id: 7,
        time_ns: 1_700_000_000_000_000_000,
        kind: change_kind::RENAME,
        path: b"new \xff name".to_vec(),
        from: Some(b"old".to_vec()),
        before: None,
        after: Some(state()),
        session: "s1".into(),
        agent: "claude".into(),
        pid: 1234,
        process: "sed".into(),
    }
}

const V1_CHANGE: &str = "01078080a8b1e39fe7cb17030a6e657720ff206e616d6501036f6c640001000ca40301000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f02733106636c61756465d20903736564";
const V2_CHANGE: &str = "02078080a8b1e39fe7cb17030a6e657720ff206e616d6501036f6c640001000ca40301000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f02733106636c61756465d2090373656401056f7468657201030104426173680107746f6f6c755f31";

// Version 3: the after state ends with its owner (`01`, uid 1000 = `e807`, gid 100 = `64`), the
// change with the uid that made it (`01 e807`).
const V3_CHANGE: &str = "03078080a8b1e39fe7cb17030a6e657720ff206e616d6501036f6c640001000ca40301000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f01e8076402733106636c61756465d2090373656401056f7468657201030104426173680107746f6f6c755f3101e807";

fn v2_change() -> v2::ChangeRecord {
    let mut v2 = v2::ChangeRecord::from(v1_change());
    v2.links = vec![b"other".to_vec()];
    v2.turn = Some(3);
    v2.tool = Some(ToolRecord {
        name: "Bash".into(),
        id: Some("toolu_1".into()),
    });
    v2
}

#[test]
fn changes_of_versions_1_and_2_read_and_version_3_written_with_its_link_groups() {
    assert_eq!(encode(1, &v1_change()), hex(V1_CHANGE));
    let read = ChangeRecord::decode("changes", b"k", &hex(V1_CHANGE)).unwrap();
    assert_eq!(
        read,
        ChangeRecord::from(v2::ChangeRecord::from(v1_change()))
    );
    assert_eq!(read.uid, None);
    assert_eq!(read.after.as_ref().unwrap().owner, None);

    assert_eq!(encode(2, &v2_change()), hex(V2_CHANGE));
    let read = ChangeRecord::decode("changes", b"k", &hex(V2_CHANGE)).unwrap();
    assert_eq!(read, ChangeRecord::from(v2_change()));
    assert_eq!((read.uid, read.turn), (None, Some(3)));

    let mut v3 = ChangeRecord::from(v2_change());
    v3.after = Some(owned_state());
    v3.uid = Some(1000);
    assert_eq!(v3.encode(), hex(V3_CHANGE));
    assert_eq!(
        ChangeRecord::decode("changes", b"k", &hex(V3_CHANGE)).unwrap(),
        v3
    );

    // With the hard-link groups it took a name from: the same bytes, then the trailer (tag
    // `01`; one group `01` of two names `02`: "a" `0161`, "d/b" `03642f62`), which a reader
    // that does not know it (postcard's own decoding of the record) ignores.
    let linked = ChangeRecord {
        groups: vec![vec![b"a".to_vec(), b"d/b".to_vec()]],
        ..v3.clone()
    };
    let trailed = hex(&format!("{V3_CHANGE}010102016103642f62"));
    assert_eq!(linked.encode(), trailed);
    assert_eq!(
        ChangeRecord::decode("changes", b"k", &trailed).unwrap(),
        linked
    );
    let old_reader: ChangeRecord = postcard::from_bytes(&trailed[1..]).unwrap();
    assert_eq!(old_reader, v3);
    // A trailer of a later version is left alone; a damaged one is an error.
    let mut unknown = hex(V3_CHANGE);
    unknown.extend_from_slice(&[2, 9, 9]);
    assert_eq!(ChangeRecord::decode("changes", b"k", &unknown).unwrap(), v3);
    let damaged = hex(&format!("{V3_CHANGE}010102016103"));
    assert!(ChangeRecord::decode("changes", b"k", &damaged).is_err());
}

#[test]
fn sessions_checkpoints_seen_and_turns() {
    let session = SessionRecord {
        name: "s1".into(),
        count: 5,
        first_id: 1,
        last_id: 9,
        first_time_ns: 100,
        last_time_ns: 900,
        agents: vec!["claude".into(), "human".into()],
    };
    let pinned = hex("010273310501096484070206636c617564650568756d616e");
    assert_eq!(session.encode(), pinned);
    assert_eq!(
        SessionRecord::decode("sessions", b"s1", &pinned).unwrap(),
        session
    );

    let checkpoint = CheckpointRecord {
        name: "before".into(),
        id: 42,
        time_ns: 1_700_000_000_000_000_000,
    };
    let pinned = hex("01066265666f72652a8080a8b1e39fe7cb17");
    assert_eq!(checkpoint.encode(), pinned);
    assert_eq!(
        CheckpointRecord::decode("checkpoints", b"c", &pinned).unwrap(),
        checkpoint
    );

    let seen = SeenRecord {
        kind: kind::SYMLINK,
        size: 11,
        mode: 0o777,
        mtime_ns: -5,
    };
    let pinned = hex("01020bff0309");
    assert_eq!(seen.encode(), pinned);
    assert_eq!(SeenRecord::decode("manifest", b"p", &pinned).unwrap(), seen);

    let known = KnownRecord {
        files: vec![KnownFileRecord {
            dev: 2049,
            ino: 7,
            size: 3,
            mtime: (1, 2),
            ctime: (3, -4),
            hash: [9; 32],
        }],
    };
    let pinned = hex(&format!("01018110070602040607{}", "09".repeat(32)));
    assert_eq!(known.encode(), pinned);
    assert_eq!(
        KnownRecord::decode("meta", b"known", &pinned).unwrap(),
        known
    );

    let turn = TurnRecord {
        session: "claude-ab12".into(),
        number: 3,
        prompt: "fix the tests".into(),
        prompt_id: Some("p-9".into()),
        agent: "claude".into(),
        start_time_ns: 1000,
        start_id: 41,
        end_time_ns: Some(2000),
        end_id: Some(48),
        conversation: None,
    };
    let pinned = hex(
        "010b636c617564652d61623132030d666978207468652074657374730103702d3906636c61756465e8072901d00f0130",
    );
    assert_eq!(turn.encode(), pinned);
    assert_eq!(TurnRecord::decode("turns", b"t", &pinned).unwrap(), turn);
    // With its conversation: the same bytes, then the trailer, which a reader that does not
    // know it (postcard's own decoding of the record) ignores.
    let talked = TurnRecord {
        conversation: Some([7; 32]),
        ..turn.clone()
    };
    let mut trailed = pinned.clone();
    trailed.push(1);
    trailed.extend_from_slice(&[7; 32]);
    assert_eq!(talked.encode(), trailed);
    assert_eq!(TurnRecord::decode("turns", b"t", &trailed).unwrap(), talked);
    let old_reader: TurnRecord = postcard::from_bytes(&trailed[1..]).unwrap();
    assert_eq!(old_reader, turn);
}

#[test]
fn open_episode_markers_of_both_versions() {
    let v1 = v1::EpisodeRecord {
        before: Some(state()),
        time_ns: 77,
        session: "s1".into(),
        agent: "claude".into(),
        pid: 4242,
        process: "vim".into(),
    };
    let pinned_v1 = hex(
        "0101000ca40301000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f4d02733106636c6175646592210376696d",
    );
    assert_eq!(encode(1, &v1), pinned_v1);
    let mut v2 = v2::EpisodeRecord::from(v1);
    assert_eq!(
        EpisodeRecord::decode("open_episodes", b"p", &pinned_v1).unwrap(),
        EpisodeRecord::from(v2.clone())
    );
    v2.turn = Some(2);
    let pinned_v2 = hex(
        "0201000ca40301000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f4d02733106636c6175646592210376696d010200",
    );
    assert_eq!(encode(2, &v2), pinned_v2);
    let mut v3 = EpisodeRecord::decode("open_episodes", b"p", &pinned_v2).unwrap();
    assert_eq!(v3, EpisodeRecord::from(v2));
    assert_eq!(v3.uid, None);
    v3.before = Some(owned_state());
    v3.uid = Some(65534);
    // The state's owner after its hash; the uid (65534 = `feff03`) last.
    let pinned_v3 = hex(
        "0301000ca40301000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f01e807644d02733106636c6175646592210376696d01020001feff03",
    );
    assert_eq!(v3.encode(), pinned_v3);
    assert_eq!(
        EpisodeRecord::decode("open_episodes", b"p", &pinned_v3).unwrap(),
        v3
    );

    // A new file fsynced before its create was recorded: the same bytes, then the trailer
    // (tag 1, device 2049, inode 77, size 14, mtime zigzag-encoded), which a reader that does
    // not know it never sees.
    let mut fsynced = v3.clone();
    fsynced.before = None;
    fsynced.fsynced = Some(FsyncedRecord {
        dev: 2049,
        ino: 77,
        size: 14,
        mtime_ns: 1_700_000_000_123_456_789,
    });
    let pinned_fsynced =
        hex("03004d02733106636c6175646592210376696d01020001feff030181104d0eaab4aed8c7bfce972f");
    assert_eq!(fsynced.encode(), pinned_fsynced);
    assert_eq!(
        EpisodeRecord::decode("open_episodes", b"p", &pinned_fsynced).unwrap(),
        fsynced
    );
    let old_reader: EpisodeRecord = postcard::from_bytes(&pinned_fsynced[1..]).unwrap();
    assert_eq!(
        old_reader,
        EpisodeRecord {
            fsynced: None,
            ..fsynced.clone()
        }
    );
    // A damaged trailer is an error that names the key.
    let damaged = &pinned_fsynced[..pinned_fsynced.len() - 3];
    assert!(EpisodeRecord::decode("open_episodes", b"p", damaged).is_err());

    // A held-back create's marker: the same bytes, then a second trailer (tag 2, id 2, time
    // 300), which a reader that knows only the first never sees (it decodes the fsynced file
    // and stops), nor one that knows neither.
    let reserved = EpisodeRecord {
        reserved: Some(ReservedRecord {
            id: 2,
            time_ns: 300,
        }),
        ..fsynced.clone()
    };
    let mut pinned_reserved = pinned_fsynced.clone();
    pinned_reserved.extend_from_slice(&hex("0202ac02"));
    assert_eq!(reserved.encode(), pinned_reserved);
    assert_eq!(
        EpisodeRecord::decode("open_episodes", b"p", &pinned_reserved).unwrap(),
        reserved
    );
    // The reader before this one decoded the fsynced file after tag 1 and ignored the rest.
    let record_len = encode(EPISODE_VERSION, &reserved).len();
    let older: FsyncedRecord = postcard::from_bytes(&pinned_reserved[record_len + 1..]).unwrap();
    assert_eq!(Some(older), fsynced.fsynced);
    let old_reader: EpisodeRecord = postcard::from_bytes(&pinned_reserved[1..]).unwrap();
    assert_eq!(
        old_reader,
        EpisodeRecord {
            fsynced: None,
            reserved: None,
            ..reserved.clone()
        }
    );
    // Without an fsync (a rename-away save held back): the second trailer alone.
    let saved = EpisodeRecord {
        fsynced: None,
        ..reserved.clone()
    };
    let mut pinned_saved = encode(EPISODE_VERSION, &saved);
    pinned_saved.extend_from_slice(&hex("0202ac02"));
    assert_eq!(saved.encode(), pinned_saved);
    assert_eq!(
        EpisodeRecord::decode("open_episodes", b"p", &pinned_saved).unwrap(),
        saved
    );
    // A damaged second trailer is an error too; a tag no version knows is left alone.
    let damaged = &pinned_reserved[..pinned_reserved.len() - 1];
    assert!(EpisodeRecord::decode("open_episodes", b"p", damaged).is_err());
    let mut unknown = pinned_reserved.clone();
    unknown.extend_from_slice(&[9, 9, 9]);
    assert_eq!(
        EpisodeRecord::decode("open_episodes", b"p", &unknown).unwrap(),
        reserved
    );
}

#[test]
fn chunk_manifests() {
    let m = ManifestRecord {
        size: 3,
        chunks: vec![(hash(), 3)],
    };
    let pinned = hex("01010301000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f03");
    assert_eq!(blobs::encode_manifest(&m), pinned);
}

#[test]
fn bad_values_are_errors_that_name_the_key() {
    let mut bytes = hex(V3_CHANGE);
    bytes.truncate(bytes.len() / 2);
    let err = ChangeRecord::decode("changes", &[0, 1], &bytes).unwrap_err();
    assert!(err.to_string().contains("changes"), "{err}");
    assert!(err.to_string().contains("0001"), "{err}");
    assert!(ChangeRecord::decode("changes", b"k", &[]).is_err());
    assert!(ChangeRecord::decode("changes", b"k", &[99, 1, 2]).is_err());
    assert!(SessionRecord::decode("sessions", b"k", &[2, 0]).is_err());
}

#[test]
fn comments() {
    let c = CommentRecord {
        id: 7,
        time_ns: 1_700_000_000_000_000_000,
        uid: 1000,
        author: "alice".into(),
        session: "claude-ab12".into(),
        target: comment::target::CHANGE,
        number: 42,
        path: Some(b"src/a.rs".to_vec()),
        line: Some(4),
        hunk: None,
        text: "rename x".into(),
        resolved: Some((2000, 1000)),
    };
    // Resolved at 2000 (`d00f`) by uid 1000 (`e807`), last.
    let pinned = hex(
        "01078080a8b1e39fe7cb17e80705616c6963650b636c617564652d61623132012a01087372632f612e72730104000872656e616d65207801d00fe807",
    );
    assert_eq!(c.encode(), pinned);
    assert_eq!(CommentRecord::decode("comments", b"k", &pinned).unwrap(), c);

    let open = CommentRecord {
        id: 8,
        time_ns: 5,
        uid: 0,
        author: "root".into(),
        session: "s1".into(),
        target: comment::target::SESSION,
        number: 0,
        path: None,
        line: None,
        hunk: Some(2),
        text: "two\nlines".into(),
        resolved: None,
    };
    let pinned = hex("0108050004726f6f740273310000000001020974776f0a6c696e657300");
    assert_eq!(open.encode(), pinned);
    assert_eq!(
        CommentRecord::decode("comments", b"k", &pinned).unwrap(),
        open
    );
}

/// A delta: `1, 2`, the chain's depth, the base's hash, then a zstd frame whose dictionary is
/// the base's content. The frame was made by zstd 1.5.7 at level 3 and must stay readable; a
/// later zstd may make other frames for the same content, so only the header is compared.
#[test]
fn deltas() {
    let base = b"fn main() {\n    println!(\"one\");\n}\n";
    let data = b"fn main() {\n    println!(\"two\");\n}\n";
    let pinned = hex(concat!(
        "010201",
        "026a78351497ec4b9526ee16f410b02c23d8454c32c43352f99a92eb538b726e",
        "28b52ffd20237d00004874776f22293b0a7d0a0100c65640",
    ));
    let base_hash = crate::store::Hash::of(base);
    assert_eq!(&pinned[3..35], &base_hash.0);
    let value = blobs::encode_delta(data, &base_hash, base, 1);
    assert_eq!(value[..35], pinned[..35]);
    assert_eq!(blobs::delta_base(&pinned), Some((base_hash, 1)));

    let dir = tempfile::tempdir().unwrap();
    let store = crate::store::Store::open(dir.path()).unwrap();
    assert_eq!(store.put_blob(base).unwrap(), base_hash);
    let hash = crate::store::Hash::of(data);
    store.put_raw_blob(&hash, &pinned).unwrap();
    assert_eq!(store.read_blob(&hash).unwrap(), data);
}
