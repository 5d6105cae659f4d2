//! anedvd-tokenizer: text ↔ token ids for LLM vocabularies.
//!
//! One merge engine (a linked list of symbols and a priority queue over
//! adjacent pairs) serves two model kinds: SentencePiece-style vocabularies
//! (the merged token's score decides, byte fallback `<0xXX>`, `▁` for
//! spaces) and byte-level / SentencePiece-style BPE (the merge rank decides).
//! Two sources feed it:
//!
//! * GGUF metadata (`tokenizer.ggml.*`), reproducing llama.cpp: the
//!   `tokenizer.ggml.pre` splitter table, special-token partitioning, BOS/EOS
//!   policy and end-of-generation detection ([`Tokenizer::from_gguf_metadata`]);
//! * HF `tokenizer.json` (+ `tokenizer_config.json`), reproducing HF
//!   `tokenizers`: added tokens, normalizers, pre-tokenizers, post-processor
//!   and decoder ([`Tokenizer::from_tokenizer_json`]).
//!
//! The crate does not read files or know file formats: callers hand it a
//! [`anedvd_base::Metadata`] or the JSON text. It knows nothing about chat
//! templates.
//!
//! ```
//! use anedvd_tokenizer::Tokenizer;
//! let json = r#"{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2},
//!                "merges": ["a b"]}}"#;
//! let tok = Tokenizer::from_tokenizer_json(json, None).unwrap();
//! assert_eq!(tok.encode("abab", false, false).unwrap(), vec![2, 2]);
//! assert_eq!(tok.decode(&[2, 0], false).unwrap(), "aba");
//! ```

mod error;
mod gguf;
mod hf;
mod merge;
mod model;
mod packed;
mod pretok;
mod special;
mod stream;
mod tokenizer;
mod unicode;
mod vocab;

pub use error::{Error, Result};
pub use stream::StreamDecoder;
pub use tokenizer::Tokenizer;
pub use vocab::TokenAttr;

// A tokenizer is shared across threads (server, batch encode).
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Tokenizer>();
};
