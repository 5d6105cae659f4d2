#![allow(dead_code)] // each target uses a subset
//! Checks shared by the tokenizer targets: what must hold for any tokenizer
//! that builds, and the lossless round trip where the vocabulary makes it
//! one.

use anedvd_tokenizer::{TokenAttr, Tokenizer};

/// GPT-2's byte → character table (`bytes_to_unicode`).
pub fn byte_level_char(b: u8) -> char {
    let printable = |x: u8| (b'!'..=b'~').contains(&x) || (0xA1..=0xAC).contains(&x) || x >= 0xAE;
    if printable(b) {
        return char::from(b);
    }
    let n = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + n).unwrap()
}

fn attr(tok: &Tokenizer, id: u32) -> TokenAttr {
    tok.token_attr(id).expect("id checked against the vocabulary")
}

/// True for an ordinary vocabulary entry (not control / user-defined / unknown).
pub fn plain(tok: &Tokenizer, id: u32) -> bool {
    let a = attr(tok, id);
    a.has(TokenAttr::NORMAL)
        && !a.has(TokenAttr(
            TokenAttr::CONTROL.0 | TokenAttr::USER_DEFINED.0 | TokenAttr::UNKNOWN.0,
        ))
}

/// True for a byte-fallback `<0xXX>` token.
pub fn byte_token(tok: &Tokenizer, id: u32) -> bool {
    let a = attr(tok, id);
    a.has(TokenAttr::BYTE)
        && !a.has(TokenAttr(
            TokenAttr::CONTROL.0 | TokenAttr::USER_DEFINED.0 | TokenAttr::UNKNOWN.0,
        ))
}

/// Every one of the 256 byte-level characters is an ordinary token.
pub fn has_all_byte_level_chars(tok: &Tokenizer) -> bool {
    (0..=255u8).all(|b| {
        tok.token_id(byte_level_char(b).encode_utf8(&mut [0; 4]))
            .is_some_and(|id| plain(tok, id))
    })
}

/// Every `<0xXX>` token is present as a byte token.
pub fn has_all_byte_tokens(tok: &Tokenizer) -> bool {
    (0..=255u8).all(|b| {
        tok.token_id(&format!("<0x{b:02X}>"))
            .is_some_and(|id| byte_token(tok, id))
    })
}

fn decode_streamed(tok: &Tokenizer, ids: &[u32], skip: bool) -> String {
    let mut d = tok.stream_decoder(skip);
    let mut out = String::new();
    for &id in ids {
        out.push_str(&d.push(id).expect("id in range"));
    }
    out.push_str(&d.finish());
    out
}

/// Encodes `text`, checks what holds for every tokenizer and returns the ids
/// (`None` when encoding refused the text, which it may).
pub fn check(tok: &Tokenizer, text: &str, add_special: bool, parse_special: bool) -> Option<Vec<u32>> {
    let n = tok.vocab_size();
    assert!(n > 0);
    for id in [tok.bos_id(), tok.eos_id(), tok.eot_id(), tok.pad_id(), tok.unk_id()]
        .into_iter()
        .flatten()
    {
        assert!((id as usize) < n, "special id {id} outside vocab of {n}");
    }
    let eog = tok.eog_ids();
    assert!(eog.windows(2).all(|w| w[0] < w[1]), "eog ids not sorted/unique");
    for &id in eog {
        assert!((id as usize) < n && tok.is_eog(id));
    }
    let ids = tok.encode(text, add_special, parse_special).ok()?;
    for &id in &ids {
        assert!((id as usize) < n, "encode produced id {id} >= vocab size {n}");
        tok.piece_bytes(id).expect("piece of an in-range id");
        assert!(tok.token_attr(id).is_some());
    }
    assert!(tok.piece_bytes(n as u32).is_err());
    assert!(tok.decode(&[n as u32], false).is_err());
    for skip in [false, true] {
        let whole = tok.decode(&ids, skip).expect("decoding in-range ids");
        // Documented: the stream decoder's output concatenates to `decode`.
        assert_eq!(decode_streamed(tok, &ids, skip), whole, "stream != decode (skip={skip})");
    }
    Some(ids)
}

/// Asserts `decode(ids) == text`.
pub fn assert_roundtrip(tok: &Tokenizer, text: &str, ids: &[u32]) {
    let back = tok.decode(ids, false).unwrap();
    assert_eq!(back, text, "decode(encode(text)) != text; ids {ids:?}");
}
