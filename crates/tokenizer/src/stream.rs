//! [`StreamDecoder`]: incremental detokenization that only ever returns
//! complete UTF-8, joining byte-fallback `<0xXX>` tokens and byte-level
//! pieces that split a character across tokens.

use crate::tokenizer::{FirstTracker, Tokenizer};
use crate::Result;

/// Turns ids into text one at a time. Bytes of an unfinished UTF-8 sequence
/// are held back until the tokens that complete it arrive; bytes that can
/// never form a character are emitted as U+FFFD.
#[derive(Debug)]
pub struct StreamDecoder<'a> {
    tok: &'a Tokenizer,
    skip_special: bool,
    pending: Vec<u8>,
    first: FirstTracker,
}

impl<'a> StreamDecoder<'a> {
    pub(crate) fn new(tok: &'a Tokenizer, skip_special: bool) -> Self {
        StreamDecoder {
            tok,
            skip_special,
            pending: Vec::new(),
            first: FirstTracker::new(tok.first_piece),
        }
    }

    /// Treats the ids as continuing earlier text: the first token keeps its
    /// leading space.
    pub fn continuing(mut self) -> Self {
        self.first.past_start();
        self
    }

    /// Adds one id; returns the text that became complete (possibly empty).
    pub fn push(&mut self, id: u32) -> Result<String> {
        let piece = self.tok.piece_bytes(id)?;
        let skipped = self.skip_special && self.tok.is_special(id);
        if let Some(p) = self.first.step(piece, skipped) {
            self.pending.extend_from_slice(&p);
        }
        Ok(self.take_complete())
    }

    /// Returns whatever is still held back (lossily), and resets the decoder.
    pub fn finish(&mut self) -> String {
        let rest = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        self.first = FirstTracker::new(self.tok.first_piece);
        rest
    }

    fn take_complete(&mut self) -> String {
        let mut out = String::new();
        let mut at = 0;
        loop {
            match std::str::from_utf8(&self.pending[at..]) {
                Ok(s) => {
                    out.push_str(s);
                    at = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // valid_up_to guarantees this slice is UTF-8.
                    out.push_str(&String::from_utf8_lossy(&self.pending[at..at + valid]));
                    at += valid;
                    match e.error_len() {
                        Some(n) => {
                            out.push('\u{FFFD}');
                            at += n;
                        }
                        None => break,
                    }
                }
            }
        }
        self.pending.drain(..at);
        out
    }
}
