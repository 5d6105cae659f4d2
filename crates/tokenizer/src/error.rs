//! The error type of the tokenizer crate.

/// Errors raised while building a tokenizer or encoding/decoding with it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A metadata key is missing or has the wrong type.
    #[error(transparent)]
    Metadata(#[from] anedvd_base::Error),
    /// The tokenizer kind (`tokenizer.ggml.model`, tokenizer.json `model.type`) is not supported.
    #[error("{key} = `{name}`: unsupported tokenizer model (supported: {supported})")]
    UnknownModel {
        /// Where the kind was read (`tokenizer.ggml.model`, `model.type`).
        key: &'static str,
        /// The kind found.
        name: String,
        /// The kinds this source supports.
        supported: &'static str,
    },
    /// The pre-tokenizer name (`tokenizer.ggml.pre`) is not known; we never guess one.
    #[error("unknown pre-tokenizer `{0}` (tokenizer.ggml.pre)")]
    UnknownPre(String),
    /// A component of tokenizer.json that this crate does not implement.
    #[error("unsupported tokenizer.json {component}: {detail}")]
    Unsupported {
        /// Which part (`normalizer`, `pre_tokenizer`, `decoder`, ...).
        component: &'static str,
        /// The offending type or option.
        detail: String,
    },
    /// A BPE vocabulary has no merges (`tokenizer.ggml.merges` / `model.merges`).
    #[error("BPE tokenizer without merges ({0})")]
    MissingMerges(String),
    /// A tokenizer.json merge rule naming a token that `model.vocab` lacks
    /// (HF `tokenizers` refuses these too).
    #[error("model.merges[{index}] `{text}`: `{token}` is not in model.vocab")]
    MergeNotInVocab {
        /// Position of the rule in the merge list.
        index: usize,
        /// The rule text.
        text: String,
        /// The missing token (a side of the rule, or the two joined).
        token: String,
    },
    /// A merge rule that cannot be parsed.
    #[error("merge #{index} `{text}` is malformed")]
    BadMerge {
        /// Position of the rule in the merge list.
        index: usize,
        /// The rule text.
        text: String,
    },
    /// Two per-token arrays that must have the same length do not.
    #[error("`{key}` has {found} entries but the vocabulary has {expected}")]
    LengthMismatch {
        /// The metadata key of the shorter/longer array.
        key: String,
        /// Number of tokens.
        expected: usize,
        /// Number of entries found.
        found: usize,
    },
    /// A token marked as a byte token is not of the form `<0xXX>`.
    #[error("token {id} `{text}` is typed as a byte token but is not `<0xXX>`")]
    BadByteToken {
        /// Token id.
        id: u32,
        /// Token text.
        text: String,
    },
    /// A token type value outside the GGUF token type enum.
    #[error("token {id} has unknown token type {value}")]
    BadTokenType {
        /// Token id.
        id: u32,
        /// The raw value.
        value: i64,
    },
    /// The vocabulary's token count or total text size does not fit the
    /// 32-bit ids and offsets of the compact tables.
    #[error("vocabulary too large ({0} tokens or bytes; the limit is 2^32 - 1)")]
    VocabTooLarge(usize),
    /// The vocabulary is empty.
    #[error("empty vocabulary")]
    EmptyVocab,
    /// A special token id (bos/eos/...) outside the vocabulary.
    #[error("`{key}` = {id} is outside the vocabulary of {vocab_size} tokens")]
    BadSpecialId {
        /// Metadata key or config field.
        key: String,
        /// The id.
        id: u64,
        /// Vocabulary size.
        vocab_size: usize,
    },
    /// A token id passed to decode is outside the vocabulary.
    #[error("token id {id} is outside the vocabulary of {vocab_size} tokens")]
    IdOutOfRange {
        /// The id.
        id: u32,
        /// Vocabulary size.
        vocab_size: usize,
    },
    /// Text contains a character that has no token and no byte fallback.
    #[error("no token for byte 0x{byte:02X} and no unknown token")]
    NoByteToken {
        /// The byte that could not be encoded.
        byte: u8,
    },
    /// The metadata wants a token (bos/eos) that the vocabulary does not define.
    #[error("{0} token is required but not defined")]
    MissingSpecial(&'static str),
    /// tokenizer.json (or tokenizer_config.json) is not valid JSON or has the wrong shape.
    #[error("{file}: {detail}")]
    Json {
        /// Which file.
        file: &'static str,
        /// What is wrong, with the JSON path where known.
        detail: String,
    },
    /// A regular expression from the tokenizer definition does not compile.
    #[error("regex `{pattern}`: {detail}")]
    Regex {
        /// The pattern.
        pattern: String,
        /// The regex engine's message.
        detail: String,
    },
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
