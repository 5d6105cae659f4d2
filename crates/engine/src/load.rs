//! Loading a model: weights, tokenizer, chat template, program, backend.

use crate::backends::{build_backend, BackendChoice, BackendOptions};
use crate::batch::EngineBatch;
use crate::session::EngineSession;
use crate::{Error, Result};
use anedvd_base::WeightSource;
use anedvd_chat::{builtin_for, template_from_hf_files, ChatTemplate, Message, RenderOptions};
use anedvd_graph::Executable;
use anedvd_model::{ConfigOverrides, DecoderConfig};
use anedvd_tokenizer::Tokenizer;
use anedvd_weights::ModelFormat;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How to load a model.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// The backend.
    pub backend: BackendChoice,
    /// How the backends are configured (CPU threads, ISA, packing; ANE lowering).
    pub backend_options: BackendOptions,
    /// Overrides of the model's metadata (family, RoPE pairing, ...).
    pub overrides: ConfigOverrides,
}

/// Where the chat template came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateOrigin {
    /// The model file (GGUF `tokenizer.chat_template`, HF tokenizer_config / chat_template.jinja).
    File,
    /// A built-in template chosen by architecture and vocabulary (named).
    Builtin(&'static str),
}

/// Progress of [`Engine::load`], for progress displays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadStage {
    /// Opening and mapping the weight files.
    Weights,
    /// Building the tokenizer.
    Tokenizer,
    /// Resolving the config and checking tensors.
    Config,
    /// Preparing the backend.
    Backend,
}

impl LoadStage {
    /// A short human description.
    pub fn describe(self) -> &'static str {
        match self {
            LoadStage::Weights => "mapping weights",
            LoadStage::Tokenizer => "building tokenizer",
            LoadStage::Config => "checking config and tensors",
            LoadStage::Backend => "preparing the backend",
        }
    }
}

/// A loaded model, ready to open sessions.
pub struct Engine {
    /// The resolved decoder configuration.
    pub config: DecoderConfig,
    /// The tokenizer.
    pub tokenizer: Tokenizer,
    /// The chat template, if the model has one or a built-in matches.
    pub template: Option<(ChatTemplate, TemplateOrigin)>,
    /// The model's display name (`general.name`, else the file name).
    pub name: String,
    /// The path it was loaded from.
    pub path: PathBuf,
    /// The format.
    pub format: ModelFormat,
    /// Time taken by [`Engine::load`].
    pub load_time: Duration,
    /// What a user should know about how the model was read
    /// (`anedvd_model::notes`), e.g. a Mistral GGUF without its window.
    pub notes: Vec<String>,
    executable: Box<dyn Executable>,
    weights: Arc<dyn WeightSource>,
}

impl Engine {
    /// Loads the model at `path`, reporting each stage to `progress`.
    pub fn load(
        path: impl AsRef<Path>,
        options: &LoadOptions,
        mut progress: impl FnMut(LoadStage),
    ) -> Result<Engine> {
        let start = Instant::now();
        let path = path.as_ref();
        progress(LoadStage::Weights);
        let opened = anedvd_weights::open(path)?;
        let weights: Arc<dyn WeightSource> = Arc::from(opened.source);
        let md = weights.metadata();

        progress(LoadStage::Tokenizer);
        let (tokenizer, file_template) = match &opened.dir {
            Some(dir) => {
                let (tok, config) = hf_tokenizer(
                    &dir.join("tokenizer.json"),
                    &dir.join("tokenizer_config.json"),
                )?;
                let jinja = read_optional(&dir.join("chat_template.jinja"))?;
                let tmpl = template_from_hf_files(jinja.as_deref(), config.as_deref())?;
                (tok, tmpl)
            }
            None => {
                let tok = Tokenizer::from_gguf_metadata(md)?;
                let tmpl = md
                    .opt_str("tokenizer.chat_template")
                    .ok()
                    .flatten()
                    .map(str::to_owned);
                (tok, tmpl)
            }
        };

        progress(LoadStage::Config);
        let (config, program) = anedvd_model::load(weights.clone(), &options.overrides)?;

        let template = pick_template(file_template, &config, &tokenizer)?;

        progress(LoadStage::Backend);
        let executable =
            build_backend(options.backend, &options.backend_options)?.compile(&program)?;

        let name = md
            .opt_str("general.name")
            .ok()
            .flatten()
            .map(str::to_owned)
            .or_else(|| {
                md.opt_str("_name_or_path")
                    .ok()
                    .flatten()
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| {
                path.file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default()
            });
        let notes = anedvd_model::notes(weights.as_ref(), &options.overrides);
        Ok(Engine {
            config,
            tokenizer,
            template,
            name,
            path: path.to_path_buf(),
            format: opened.kind,
            load_time: start.elapsed(),
            notes,
            executable,
            weights,
        })
    }

    /// Opens a session holding up to `max_seq` positions.
    pub fn new_session(&self, max_seq: usize) -> Result<EngineSession> {
        Ok(EngineSession::new(self.executable.new_session(max_seq)?))
    }

    /// Opens `n_seqs` sequences of `max_seq` positions each that advance
    /// together in one batched forward pass (backends that cannot batch run
    /// them one after another).
    pub fn new_batch(&self, n_seqs: usize, max_seq: usize) -> Result<EngineBatch> {
        Ok(EngineBatch::new(
            self.executable.new_batch(n_seqs, max_seq)?,
        ))
    }

    /// Bytes of KV cache one position of one sequence takes: keys and
    /// values in f16 (as both backends keep them) of every layer with its
    /// own cache (not convolution layers, not layers reading an earlier
    /// layer's K/V).
    pub fn kv_bytes_per_position(&self) -> usize {
        let c = &self.config;
        (0..c.n_layer)
            .filter(|&i| !c.conv_layers.get(i).copied().unwrap_or(false))
            .filter(|&i| c.kv_sources.get(i).is_none_or(Option::is_none))
            .map(|i| {
                let heads = c.n_head_kv_layers.get(i).copied().unwrap_or(c.n_head_kv);
                let dim = c.head_dim_layers.get(i).copied().unwrap_or(c.head_dim);
                2 * heads * dim * std::mem::size_of::<u16>()
            })
            .sum()
    }

    /// The context length the model was trained with.
    pub fn n_ctx_train(&self) -> usize {
        self.executable.n_ctx_train()
    }

    /// Vocabulary size of the logits.
    pub fn vocab_size(&self) -> usize {
        self.executable.vocab_size()
    }

    /// Bytes of all tensors (the model's weight size).
    pub fn weight_bytes(&self) -> u64 {
        self.weights.tensors().iter().map(|t| t.size_bytes).sum()
    }

    /// Number of weight elements (parameters).
    pub fn n_params(&self) -> u64 {
        self.weights.tensors().iter().map(|t| t.elements()).sum()
    }

    /// A metadata string of the model file, if present.
    pub fn metadata_str(&self, key: &str) -> Option<&str> {
        self.weights.metadata().opt_str(key).ok().flatten()
    }

    /// True if the model is instruction-tuned as far as its files tell: it has a
    /// template of its own, or its name says so (`-it`, `instruct`, `chat`).
    pub fn is_chat_model(&self) -> bool {
        if matches!(self.template, Some((_, TemplateOrigin::File))) {
            return true;
        }
        let n = self.name.to_ascii_lowercase();
        n.ends_with("-it") || n.contains("-it-") || n.contains("instruct") || n.contains("chat")
    }

    /// Renders `messages` with the chat template and tokenizes the result
    /// (special tokens parsed). The model's own template is tokenized as
    /// rendered, as transformers' `apply_chat_template` does (Phi-3's
    /// template has no BOS although its tokenizer adds one to plain text);
    /// a built-in template gets the BOS the metadata asks for if it did not
    /// write one.
    pub fn chat_prompt(&self, messages: &[Message]) -> Result<Vec<u32>> {
        let opts = RenderOptions {
            add_generation_prompt: true,
            ..Default::default()
        };
        self.chat_prompt_with(messages, &opts)
    }

    /// [`Engine::chat_prompt`] with explicit render options (template kwargs,
    /// tools, a fixed clock, ...).
    pub fn chat_prompt_with(&self, messages: &[Message], opts: &RenderOptions) -> Result<Vec<u32>> {
        let (tmpl, origin) = self.template.as_ref().ok_or(Error::NoTemplate)?;
        let text = tmpl.render(messages, opts)?;
        match origin {
            TemplateOrigin::File => Ok(self.tokenizer.encode(&text, false, true)?),
            TemplateOrigin::Builtin(_) => self.encode_rendered(&text),
        }
    }

    /// Tokenizes raw text as a prompt: BOS per the model's metadata.
    pub fn raw_prompt(&self, text: &str) -> Result<Vec<u32>> {
        Ok(self.tokenizer.encode(text, true, false)?)
    }

    fn encode_rendered(&self, text: &str) -> Result<Vec<u32>> {
        let bos_text = self
            .tokenizer
            .bos_id()
            .and_then(|b| self.tokenizer.token_text(b));
        let has_bos = bos_text.is_some_and(|b| !b.is_empty() && text.starts_with(b));
        Ok(self.tokenizer.encode(text, !has_bos, true)?)
    }
}

fn pick_template(
    file_template: Option<String>,
    config: &DecoderConfig,
    tokenizer: &Tokenizer,
) -> Result<Option<(ChatTemplate, TemplateOrigin)>> {
    let text = |id: Option<u32>| {
        id.and_then(|i| tokenizer.token_text(i))
            .unwrap_or("")
            .to_owned()
    };
    let (bos, eos) = (text(tokenizer.bos_id()), text(tokenizer.eos_id()));
    if let Some(src) = file_template {
        return Ok(Some((
            ChatTemplate::new(&src, &bos, &eos)?,
            TemplateOrigin::File,
        )));
    }
    let Some(builtin) = builtin_for(config.family, |t| tokenizer.token_id(t).is_some()) else {
        return Ok(None);
    };
    let tmpl = ChatTemplate::new(builtin.source(), &bos, &eos)?;
    Ok(Some((tmpl, TemplateOrigin::Builtin(builtin.name()))))
}

/// The tokenizer of a Hugging Face layout: `json` (tokenizer.json, required)
/// with `config` (tokenizer_config.json, optional: special-token flags);
/// also returns the config's text (it may carry the chat template).
pub(crate) fn hf_tokenizer(json: &Path, config: &Path) -> Result<(Tokenizer, Option<String>)> {
    let text = read_required(json)?;
    let config = read_optional(config)?;
    let tokenizer = Tokenizer::from_tokenizer_json(&text, config.as_deref())?;
    Ok((tokenizer, config))
}

fn read_required(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn read_optional(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}
