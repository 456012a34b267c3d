//! Reviewer comments, in `meta` under `comment NUL id` (a prefix of their own, so a store
//! written before them opens unchanged, and an older rewind still opens a store that has
//! them); ids are handed out by the `meta` counter `comments`. Resolving a comment rewrites its
//! record. gc leaves them alone.

use rocksdb::WriteBatch;

use super::{CF_META, CommentRecord, Result, Store, keys};

const PREFIX: &[u8] = b"comment";

impl Store {
    /// The next comment id (never the same twice).
    pub fn next_comment_id(&self) -> Result<u64> {
        self.next_in_sequence(b"comments")
    }

    /// Write a comment (a new one, or one resolved).
    pub fn put_comment(&self, comment: &CommentRecord) -> Result<()> {
        let db = self.db()?;
        let mut batch = WriteBatch::default();
        batch.put_cf(
            db.cf(CF_META),
            keys::named(PREFIX, comment.id),
            comment.encode(),
        );
        drop(db);
        self.write("comment", batch)
    }

    pub fn comment(&self, id: u64) -> Result<Option<CommentRecord>> {
        self.get(CF_META, &keys::named(PREFIX, id), CommentRecord::decode)
    }

    /// Every comment, oldest first.
    pub fn comments(&self) -> Result<Vec<CommentRecord>> {
        self.scan(CF_META, &keys::named_prefix(PREFIX), CommentRecord::decode)
    }
}
