//! Loading a model: weights, tokenizer, chat template, program, backend.

use crate::backends::{build_backend, BackendChoice, BackendOptions};
use crate::batch::EngineBatch;
use crate::constrain::{CompiledGrammar, Constraints, Grammar};
use crate::session::EngineSession;
use crate::{Error, KvType, Result};
use anedvd_base::WeightSource;
use anedvd_chat::{
    builtin_for, template_from_hf_files, BuiltinTemplate, ChatTemplate, Message, RenderOptions,
};
use anedvd_graph::Executable;
use anedvd_model::{ConfigOverrides, DecoderConfig};
use anedvd_tokenizer::Tokenizer;
use anedvd_weights::ModelFormat;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
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
    /// Scan every weight for NaN and infinities before the backend is
    /// prepared ([`check_tensors`]; reads the whole model once). A bad
    /// weight fails the load with [`Error::NonFiniteWeight`] naming it.
    pub check_tensors: bool,
    /// A chat template to use instead of the model's own (or the built-in
    /// one chosen for it): `--chat-template`, `--chat-template-file`.
    pub chat_template: Option<TemplateOverride>,
}

/// A chat template given by the user in place of the model's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateOverride {
    /// One of the built-in templates, by name (`chatml`, `llama3`, ...).
    Builtin(BuiltinTemplate),
    /// Jinja text; `from` says where it came from (a file's path, or
    /// `--chat-template`), for messages.
    Source {
        /// The Jinja source.
        text: String,
        /// Its origin, as shown to the user.
        from: String,
    },
}

/// Where the chat template came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateOrigin {
    /// The model file (GGUF `tokenizer.chat_template`, HF tokenizer_config / chat_template.jinja).
    File,
    /// A built-in template chosen by architecture and vocabulary (named).
    Builtin(&'static str),
    /// Given in place of the model's ([`LoadOptions::chat_template`]): where from.
    Given(String),
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
    /// Scanning the weights for NaN and infinities (with
    /// [`LoadOptions::check_tensors`]): `done` of `total` bytes so far.
    CheckTensors {
        /// Bytes scanned.
        done: u64,
        /// Bytes of all tensors.
        total: u64,
    },
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
            LoadStage::CheckTensors { .. } => "scanning weights for NaN/Inf",
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
    /// How the backend's KV caches store rows (the CPU's `--cache-type`;
    /// the ANE backends' host caches are f16).
    kv_type: KvType,
    /// The grammar engine over this tokenizer, built on first use.
    constraints: OnceLock<std::result::Result<Constraints, String>>,
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
                let tok = gguf_tokenizer(path, md)?;
                let tmpl = md
                    .opt_str("tokenizer.chat_template")
                    .ok()
                    .flatten()
                    .map(str::to_owned);
                (tok, tmpl)
            }
        };

        progress(LoadStage::Config);
        let (config, program) =
            build_model(path, opened.kind, weights.clone(), &options.overrides)?;

        let template = match &options.chat_template {
            Some(given) => Some(given_template(given, &tokenizer)?),
            None => pick_template(file_template, &config, &tokenizer)?,
        };

        if options.check_tensors {
            scan_with_progress(weights.as_ref(), path, |done, total| {
                progress(LoadStage::CheckTensors { done, total })
            })?;
        }

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
            kv_type: match options.backend {
                BackendChoice::Cpu => options.backend_options.cpu.kv_type,
                _ => KvType::F16,
            },
            constraints: OnceLock::new(),
        })
    }

    /// The grammar engine for this model's tokenizer (its token trie is
    /// built on the first call: about a second for a 256k vocabulary).
    pub fn constraints(&self) -> Result<&Constraints> {
        self.constraints
            .get_or_init(|| Constraints::new(&self.tokenizer).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|m| Error::BadGrammar(m.clone()))
    }

    /// Compiles `grammar` for constrained decoding with this model
    /// ([`crate::GenerateParams::grammar`]); an invalid one is an error
    /// naming the problem.
    pub fn compile_grammar(&self, grammar: &Grammar) -> Result<CompiledGrammar> {
        self.constraints()?.compile(grammar)
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

    /// Bytes of KV cache one position of one sequence takes at most: keys
    /// and values (f16, or the CPU's `--cache-type`) of every layer with
    /// its own cache (not convolution layers, not layers reading an
    /// earlier layer's K/V). Sliding-window layers stop growing at their
    /// window, so a long sequence takes less.
    pub fn kv_bytes_per_position(&self) -> usize {
        let c = &self.config;
        (0..c.n_layer)
            .filter(|&i| !c.conv_layers.get(i).copied().unwrap_or(false))
            .filter(|&i| c.kv_sources.get(i).is_none_or(Option::is_none))
            .map(|i| {
                let heads = c.n_head_kv_layers.get(i).copied().unwrap_or(c.n_head_kv);
                let dim = c.head_dim_layers.get(i).copied().unwrap_or(c.head_dim);
                let kind = Some(self.kv_type)
                    .filter(|k| k.holds(dim))
                    .unwrap_or(KvType::F16);
                2 * heads * kind.row_bytes(dim)
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
        let text = self.chat_text(messages, opts)?;
        match self.template.as_ref().map(|(_, origin)| origin) {
            Some(TemplateOrigin::File) => Ok(self.tokenizer.encode(&text, false, true)?),
            // Templates not made for this model may or may not write BOS: add
            // it where the model wants one and the text lacks it (as llama.cpp).
            _ => self.encode_rendered(&text),
        }
    }

    /// The conversation rendered by the chat template, as text (what
    /// [`Engine::chat_prompt_with`] tokenizes; llama-server's `/apply-template`).
    pub fn chat_text(&self, messages: &[Message], opts: &RenderOptions) -> Result<String> {
        let (tmpl, _) = self.template.as_ref().ok_or(Error::NoTemplate)?;
        Ok(tmpl.render(messages, opts)?)
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

/// The tokenizer's BOS and EOS texts, as templates see them (`bos_token`, `eos_token`).
fn special_texts(tokenizer: &Tokenizer) -> (String, String) {
    let text = |id: Option<u32>| {
        id.and_then(|i| tokenizer.token_text(i))
            .unwrap_or("")
            .to_owned()
    };
    (text(tokenizer.bos_id()), text(tokenizer.eos_id()))
}

/// The template the user gave in place of the model's; a template that does
/// not compile is an error naming where it came from.
fn given_template(
    given: &TemplateOverride,
    tokenizer: &Tokenizer,
) -> Result<(ChatTemplate, TemplateOrigin)> {
    let (bos, eos) = special_texts(tokenizer);
    let (text, from) = match given {
        TemplateOverride::Builtin(b) => (b.source(), format!("built-in `{}`", b.name())),
        TemplateOverride::Source { text, from } => (text.as_str(), from.clone()),
    };
    let tmpl = ChatTemplate::new(text, &bos, &eos).map_err(|e| Error::GivenTemplate {
        from: from.clone(),
        detail: e.to_string(),
    })?;
    Ok((tmpl, TemplateOrigin::Given(from)))
}

fn pick_template(
    file_template: Option<String>,
    config: &DecoderConfig,
    tokenizer: &Tokenizer,
) -> Result<Option<(ChatTemplate, TemplateOrigin)>> {
    let (bos, eos) = special_texts(tokenizer);
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
/// also returns the config's text (it may carry the chat template). An
/// error names the file at fault.
pub(crate) fn hf_tokenizer(json: &Path, config: &Path) -> Result<(Tokenizer, Option<String>)> {
    let text = read_required(json)?;
    let config_text = read_optional(config)?;
    let tokenizer =
        Tokenizer::from_tokenizer_json(&text, config_text.as_deref()).map_err(|source| {
            let (path, message) = match &source {
                anedvd_tokenizer::Error::Json { file, detail }
                    if *file == "tokenizer_config.json" =>
                {
                    (config, detail.clone())
                }
                anedvd_tokenizer::Error::Json { detail, .. } => (json, detail.clone()),
                other => (json, other.to_string()),
            };
            Error::TokenizerFile {
                path: path.to_path_buf(),
                message,
                source,
            }
        })?;
    Ok((tokenizer, config_text))
}

/// The tokenizer in the metadata of the GGUF file at `path`.
pub(crate) fn gguf_tokenizer(path: &Path, md: &anedvd_base::Metadata) -> Result<Tokenizer> {
    Tokenizer::from_gguf_metadata(md).map_err(|source| Error::TokenizerOf {
        path: path.to_path_buf(),
        source,
    })
}

/// [`anedvd_model::load`] of the model opened from `path`, its errors naming
/// the file at fault: a Hugging Face directory's `config.json` (the
/// directory itself when a tensor is missing or disagrees with the config),
/// or the GGUF file.
pub(crate) fn build_model(
    path: &Path,
    format: ModelFormat,
    weights: Arc<dyn WeightSource>,
    overrides: &ConfigOverrides,
) -> Result<(DecoderConfig, anedvd_graph::DecoderProgram)> {
    use anedvd_model::Error as M;
    anedvd_model::load(weights, overrides).map_err(|source| {
        let path = match (&source, format) {
            (M::MissingTensor(_) | M::Program(_), _) => path.to_path_buf(),
            (_, ModelFormat::HuggingFace) => path.join("config.json"),
            _ => path.to_path_buf(),
        };
        Error::ModelConfig { path, source }
    })
}

/// [`check_tensors`] on the rayon pool while this thread calls
/// `progress(done, total)` (bytes) every 100 ms, first with 0 and last with
/// `total` when the scan passes.
pub(crate) fn scan_with_progress(
    weights: &dyn WeightSource,
    path: &Path,
    mut progress: impl FnMut(u64, u64),
) -> Result<()> {
    let total = weights.tensors().iter().map(|t| t.size_bytes).sum();
    progress(0, total);
    let done = AtomicU64::new(0);
    let (tx, rx) = mpsc::channel::<()>();
    let checked = std::thread::scope(|s| {
        let scan = s.spawn(|| {
            // dropped when the scan ends, which wakes the loop below
            let _finished = tx;
            check_tensors(weights, path, &done)
        });
        while let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(Duration::from_millis(100))
        {
            progress(done.load(Ordering::Relaxed), total);
        }
        scan.join()
    });
    match checked {
        Ok(result) => result?,
        Err(panic) => std::panic::resume_unwind(panic),
    }
    progress(total, total);
    Ok(())
}

/// Bytes of tensor data scanned per parallel work item.
const CHECK_PIECE_BYTES: u64 = 8 << 20;

/// Scans every tensor of `weights` (the model at `path`) for NaN and
/// infinities, in parallel over pieces of at most 8 MiB, adding the bytes
/// scanned to `done` as it goes: F32/F16/BF16/F64 from their bits, block
/// types through their dequantization ([`anedvd_quant::find_non_finite`],
/// which also catches NaN/Inf block scales). The first bad element in file
/// order is reported as [`Error::NonFiniteWeight`] with the tensor's name
/// and the element's index (llama.cpp's `--check-tensors`).
pub fn check_tensors(weights: &dyn WeightSource, path: &Path, done: &AtomicU64) -> Result<()> {
    use rayon::prelude::*;
    // (tensor, byte range) pieces, block-aligned, in file order.
    let mut pieces: Vec<(usize, u64, u64)> = Vec::new();
    for (i, t) in weights.tensors().iter().enumerate() {
        let block = t.dtype.block_bytes();
        let step = (CHECK_PIECE_BYTES / block).max(1) * block;
        let mut start = 0;
        while start < t.size_bytes {
            let end = (start + step).min(t.size_bytes);
            pieces.push((i, start, end));
            start = end;
        }
    }
    let infos = weights.tensors();
    let bad = pieces.par_iter().find_map_first(|&(i, start, end)| {
        let info = &infos[i];
        let data_err = |source| Error::TensorData {
            path: path.to_path_buf(),
            tensor: info.name.clone(),
            source,
        };
        let Some(t) = weights.tensor(&info.name) else {
            return Some(Error::Invalid(format!(
                "tensor `{}` is listed but has no data",
                info.name
            )));
        };
        let range = start as usize..end as usize;
        weights.will_read(&info.name, range.clone());
        let found = t
            .data
            .get(range)
            .ok_or_else(|| {
                data_err(anedvd_quant::Error::BadLength {
                    ty: info.dtype,
                    what: format!("{} bytes stored, {} listed", t.data.len(), info.size_bytes),
                })
            })
            .and_then(|bytes| anedvd_quant::find_non_finite(info.dtype, bytes).map_err(data_err));
        done.fetch_add(end - start, Ordering::Relaxed);
        let elements_before = start / info.dtype.block_bytes() * info.dtype.block_size();
        match found {
            Ok(None) => None,
            Ok(Some(hit)) => Some(Error::NonFiniteWeight {
                path: path.to_path_buf(),
                tensor: info.name.clone(),
                index: elements_before + hit.index,
                elements: info.elements(),
                value: hit.value,
            }),
            Err(e) => Some(e),
        }
    });
    bad.map_or(Ok(()), Err)
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
