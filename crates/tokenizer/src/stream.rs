//! [`StreamDecoder`]: incremental detokenization that only ever returns
//! complete UTF-8, joining byte-fallback `<0xXX>` tokens and byte-level
//! pieces that split a character across tokens.

use crate::tokenizer::Tokenizer;
use crate::Result;

/// Turns ids into text one at a time. Bytes of an unfinished UTF-8 sequence
/// are held back until the tokens that complete it arrive; bytes that can
/// never form a character are emitted as U+FFFD.
#[derive(Debug)]
pub struct StreamDecoder<'a> {
    tok: &'a Tokenizer,
    skip_special: bool,
    pending: Vec<u8>,
    first: bool,
}

impl<'a> StreamDecoder<'a> {
    pub(crate) fn new(tok: &'a Tokenizer, skip_special: bool) -> Self {
        StreamDecoder {
            tok,
            skip_special,
            pending: Vec::new(),
            first: true,
        }
    }

    /// Adds one id; returns the text that became complete (possibly empty).
    pub fn push(&mut self, id: u32) -> Result<String> {
        let piece = self.tok.piece_bytes(id)?;
        if self.skip_special && self.tok.is_special(id) {
            return Ok(String::new());
        }
        let piece = if self.first {
            self.tok.first_piece.apply(piece)
        } else {
            piece.into()
        };
        self.first &= self.tok.first_piece.still_first(&piece);
        self.pending.extend_from_slice(&piece);
        Ok(self.take_complete())
    }

    /// Returns whatever is still held back (lossily), and resets the decoder.
    pub fn finish(&mut self) -> String {
        let rest = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        self.first = true;
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
