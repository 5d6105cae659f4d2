//! anedvd-chat: chat messages and chat-template rendering.
//!
//! Renders a model's own Jinja chat template with minijinja exactly as HF transformers'
//! `apply_chat_template` does (same whitespace options, `raise_exception`, `strftime_now`,
//! `tojson` with `json.dumps` semantics, Python string methods, Python-style value printing),
//! finds the template in a `tokenizer_config.json` / `chat_template.jinja`, and carries built-in
//! official templates for model files that have none.
//!
//! Known differences from Jinja2 (none of them met by the golden templates): iterating `none`
//! yields nothing where Jinja2 raises; `~` concatenation prints booleans/`none` as minijinja does
//! (`true`, `none`) where Python prints `True`/`None` (`{{ }}` output, `string`, `join`, `trim`
//! and `tojson` do follow Python); Python `%` string formatting is not supported. Limits: fuel
//! stops endless loops and the output cap stops huge prompts, but a template that doubles a
//! string in a short loop (`s + s`) can still exhaust memory before either trips (transformers
//! has the same exposure).
//!
//! It does not know GGUF, files or tokenizers: callers pass text (a template, a JSON config) and
//! token strings in, and get a prompt string out.
//!
//! ```
//! use anedvd_chat::{builtin_for, ChatTemplate, Message, RenderOptions};
//! let builtin = builtin_for("gemma3", |_| false).expect("gemma has a built-in template");
//! let tmpl = ChatTemplate::new(builtin.source(), "<bos>", "<eos>")?;
//! let opts = RenderOptions { add_generation_prompt: true, ..Default::default() };
//! let prompt = tmpl.render(&[Message::user("Hi")], &opts)?;
//! assert_eq!(prompt, "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
//! # Ok::<(), anedvd_chat::Error>(())
//! ```

mod builtin;
mod error;
mod message;
mod pyfmt;
pub mod shift;
mod source;
mod strftime;
mod template;

pub use builtin::{builtin_for, BuiltinTemplate};
pub use error::{Error, Result};
pub use message::{Content, ContentPart, FunctionCall, Message, ToolCall};
pub use source::{
    select_template, special_tokens_from_tokenizer_config, template_from_hf_files,
    template_from_tokenizer_config, templates_from_tokenizer_config, NamedTemplate, SpecialTokens,
};
pub use strftime::Timestamp;
pub use template::{ChatTemplate, Limits, RenderOptions};
