//! Reviewer comments: one record per comment under its id, ids handed out by the `meta`
//! counter `comments`. Resolving one rewrites its record. gc leaves them alone.

use rocksdb::WriteBatch;

use super::{CF_COMMENTS, CommentRecord, Result, Store, keys};

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
            db.cf(CF_COMMENTS),
            keys::change(comment.id),
            comment.encode(),
        );
        drop(db);
        self.write("comment", batch)
    }

    pub fn comment(&self, id: u64) -> Result<Option<CommentRecord>> {
        self.get(CF_COMMENTS, &keys::change(id), CommentRecord::decode)
    }

    /// Every comment, oldest first.
    pub fn comments(&self) -> Result<Vec<CommentRecord>> {
        self.scan(CF_COMMENTS, b"", CommentRecord::decode)
    }
}
