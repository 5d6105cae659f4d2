//! The engine's error type.

/// Errors of loading and generation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The weights could not be opened or read.
    #[error(transparent)]
    Weights(#[from] anedvd_weights::Error),
    /// The model could not be configured from its metadata.
    #[error(transparent)]
    Model(#[from] anedvd_model::Error),
    /// The backend refused the program or failed while running it.
    #[error(transparent)]
    Backend(#[from] anedvd_graph::Error),
    /// The tokenizer could not be built, or failed on input.
    #[error(transparent)]
    Tokenizer(#[from] anedvd_tokenizer::Error),
    /// The chat template could not be loaded or rendered.
    #[error(transparent)]
    Chat(#[from] anedvd_chat::Error),
    /// A model's tokenizer could not be built.
    #[error("loading the tokenizer of {path}: {source}")]
    TokenizerOf {
        /// The model or tokenizer file.
        path: std::path::PathBuf,
        /// The cause.
        source: anedvd_tokenizer::Error,
    },
    /// The model's config (a Hugging Face `config.json`, a GGUF file's
    /// metadata) is missing, contradicts itself or its tensors, or is absurd.
    #[error("{}: {source}", path.display())]
    ModelConfig {
        /// The file at fault (`config.json`; the directory when a tensor
        /// disagrees with it; the GGUF file).
        path: std::path::PathBuf,
        /// The cause, naming the key or tensor.
        source: anedvd_model::Error,
    },
    /// A Hugging Face tokenizer file (`tokenizer.json`,
    /// `tokenizer_config.json`) is malformed or unsupported.
    #[error("{}: {message}", path.display())]
    TokenizerFile {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong, naming the field (the cause's text without the file name).
        message: String,
        /// The cause.
        #[source]
        source: anedvd_tokenizer::Error,
    },
    /// `check_tensors` found a NaN or an infinity in a weight.
    #[error("{}: tensor `{tensor}` holds {value} at element {index} (of {elements}); the weights are corrupt or were converted with an overflow", path.display())]
    NonFiniteWeight {
        /// The model path.
        path: std::path::PathBuf,
        /// The tensor.
        tensor: String,
        /// The element's index in storage order (0-based).
        index: u64,
        /// The tensor's element count.
        elements: u64,
        /// The value (NaN, inf or -inf).
        value: f32,
    },
    /// A tensor's bytes could not be decoded by its dtype.
    #[error("{}: tensor `{tensor}`: {source}", path.display())]
    TensorData {
        /// The model path.
        path: std::path::PathBuf,
        /// The tensor.
        tensor: String,
        /// The cause.
        source: anedvd_quant::Error,
    },
    /// The decoder could not be lowered to ANE programs.
    #[error(transparent)]
    Lowering(#[from] anedvd_ane::lower::Error),
    /// The ANE runtime (a driver, or writing a program's files) failed.
    #[error(transparent)]
    Runtime(#[from] anedvd_ane::runtime::Error),
    /// A MIL program could not be built.
    #[error(transparent)]
    Mil(#[from] anedvd_mil::Error),
    /// A GGUF file's header could not be read.
    #[error(transparent)]
    Gguf(#[from] anedvd_gguf::Error),
    /// The scheduler's batch thread could not be spawned.
    #[error("spawning the batch thread: {0}")]
    Spawn(std::io::Error),
    /// A tool was given options it cannot use (the message names them).
    #[error("{0}")]
    Invalid(String),
    /// A file next to the model could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Nothing to run.
    #[error("the prompt is empty")]
    EmptyPrompt,
    /// The prompt does not fit the context.
    #[error("the prompt has {prompt} tokens but the context holds {max_seq} (use a larger --max-seq, or --truncate to keep the newest tokens)")]
    PromptTooLong {
        /// Prompt tokens.
        prompt: usize,
        /// Context capacity.
        max_seq: usize,
    },
    /// A sampling parameter is out of range.
    #[error("invalid sampling parameters: {0}")]
    BadParams(String),
    /// A grammar or schema for constrained decoding is invalid, or the
    /// output could not be kept inside it.
    #[error("grammar: {0}")]
    BadGrammar(String),
    /// Speculative decoding cannot run as asked (sizes, draft model).
    #[error("speculative decoding: {0}")]
    BadSpeculation(String),
    /// The model has no chat template and none is built in for its family.
    #[error("the model has no chat template and no built-in template matches it; use --raw")]
    NoTemplate,
    /// A chat template given in place of the model's does not compile.
    #[error("chat template ({from}): {detail}")]
    GivenTemplate {
        /// Where it came from (a file's path, `--chat-template`, a built-in's name).
        from: String,
        /// The template engine's message.
        detail: String,
    },
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
