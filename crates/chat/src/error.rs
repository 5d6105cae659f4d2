//! The crate's error type.

/// Everything that can go wrong while finding, compiling or rendering a chat template.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The template source does not parse.
    #[error("chat template syntax error{}: {message}", line_suffix(*line))]
    Syntax {
        /// 1-based line of the template where the error was found, when known.
        line: Option<usize>,
        /// What the parser said.
        message: String,
    },
    /// The template called `raise_exception(message)`: the conversation is one the template rejects.
    #[error("chat template raised an exception: {message}")]
    Raised {
        /// The message the template passed to `raise_exception`.
        message: String,
    },
    /// The template failed while rendering (bad types, unknown method, undefined attribute, ...).
    #[error("chat template render error{}: {message}", line_suffix(*line))]
    Render {
        /// 1-based template line being executed, when known.
        line: Option<usize>,
        /// What went wrong.
        message: String,
    },
    /// The template ran out of its instruction budget (an endless or explosive loop).
    #[error("chat template exceeded its instruction budget of {fuel} steps (endless loop?)")]
    OutOfFuel {
        /// The budget that was exhausted.
        fuel: u64,
    },
    /// The rendered prompt grew past the output cap.
    #[error("chat template output exceeded {limit} bytes")]
    OutputTooLarge {
        /// The cap in bytes.
        limit: usize,
    },
    /// `continue_final_message` cannot be honoured for this conversation or template.
    #[error("cannot continue the final message: {reason}")]
    Continue {
        /// Why.
        reason: String,
    },
    /// A JSON input (tokenizer_config.json, a message, a case) is malformed.
    #[error("invalid JSON in {what}: {message}")]
    Json {
        /// Which input was being read.
        what: &'static str,
        /// The parser's message.
        message: String,
    },
    /// A configuration key holds a value of the wrong shape.
    #[error("invalid `{key}` in {what}: {message}")]
    InvalidConfig {
        /// Which input was being read.
        what: &'static str,
        /// The offending key.
        key: String,
        /// Why it is invalid.
        message: String,
    },
}

fn line_suffix(line: Option<usize>) -> String {
    match line {
        Some(l) => format!(" at line {l}"),
        None => String::new(),
    }
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
