//! Options and helpers shared by the model-running subcommands.

use anedvd_engine::{
    BackendChoice, BackendOptions, BuiltinTemplate, ConfigOverrides, CpuOptions, Engine, IsaCap,
    KeepFp16, KvType, LoadOptions, LoadStage, LowerOptions, RopePairing, RuntimePath,
    SamplingParams, TemplateOverride, Variant, WeightFormat,
};
use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The default model's file name under the model directory.
const DEFAULT_MODEL_FILE: &str = "gemma3-270m-q4_k_m.gguf";

/// Which model to load and how.
#[derive(Debug, Args, Clone)]
pub struct ModelArgs {
    /// Model: a .gguf file, a Hugging Face directory (config.json + safetensors),
    /// or hf://ORG/REPO[:FILE|:QUANT] to download it from the Hugging Face hub
    /// into its cache first (or use the cached copy; see `anedvd pull --help`).
    /// Default: $ANEDVD_MODEL, else ~/.cache/models/gemma3-270m-q4_k_m.gguf
    /// (fetch it with scripts/fetch-model.sh).
    #[arg(short, long, value_name = "PATH")]
    pub model: Option<PathBuf>,
    /// CPU threads (default: one per core).
    #[arg(short = 't', long, value_name = "N")]
    pub threads: Option<usize>,
    /// Override the RoPE element pairing (norm = adjacent pairs, neox = half split).
    #[arg(long, value_name = "norm|neox")]
    pub rope_pairing: Option<String>,
    /// Treat the model as this family (llama, mistral, qwen2, qwen3, gemma2, gemma3,
    /// smollm3, qwen2_moe, qwen3_moe, lfm2, lfm2_moe, phi3, gemma4).
    #[arg(long, value_name = "NAME")]
    pub family: Option<String>,
    /// Replace the sliding window (0 disables it). Mistral GGUFs lose the window
    /// in llama.cpp's conversion: `--family mistral --sliding-window 4096` puts it
    /// back on every layer (`inspect` says when a file needs it).
    #[arg(long, value_name = "N")]
    pub sliding_window: Option<usize>,
    /// Replace the model's training context length, which caps --max-seq.
    /// Positions past what the model was trained on work mechanically but
    /// the model was never taught them (meant for tests on tiny models).
    #[arg(long, value_name = "N")]
    pub ctx_train: Option<usize>,
    /// Scan every weight for NaN and infinities while loading (as llama.cpp's
    /// --check-tensors): reads the whole model once, in parallel, with a
    /// progress bar; quantized blocks are dequantized, so a NaN/Inf block scale
    /// is caught too. The load fails naming the first bad tensor and element.
    #[arg(long)]
    pub check_tensors: bool,
    /// Use this chat template instead of the model's own: a built-in's name
    /// (gemma, chatml, llama3, llama2, mistral, phi3, lfm2, smollm2, qwen3)
    /// or the Jinja text itself (as llama-server's --chat-template with --jinja).
    /// The template decides the tool-call format too.
    #[arg(long, value_name = "NAME|JINJA", conflicts_with = "chat_template_file")]
    pub chat_template: Option<String>,
    /// Read the chat template (Jinja, as in a model's tokenizer_config.json or
    /// chat_template.jinja) from this file instead of using the model's own.
    #[arg(long, value_name = "PATH")]
    pub chat_template_file: Option<PathBuf>,
}

/// Largest chat template file read (real ones are under 100 KiB).
const MAX_TEMPLATE_FILE_BYTES: u64 = 4 << 20;

/// Which backend runs the model (for run, chat, serve, bench).
#[derive(Debug, Args, Clone)]
pub struct BackendArgs {
    /// Backend: cpu (default), ane (Apple Neural Engine, see --driver) or ane-sim
    /// (the ANE programs run by our fp16 MIL simulator; slow, for verification).
    #[arg(long, default_value = "cpu", value_name = "cpu|ane|ane-sim")]
    pub backend: String,
    /// With --backend ane: the driver, `ane` (AppleNeuralEngine.framework, the
    /// inmem path; macOS only), `e5rt` (Espresso, the e5rt path, with --ane-path
    /// e5rt; macOS only) or `sim` (the simulated driver of --ane-path's path).
    #[arg(long, default_value = "ane", value_name = "ane|e5rt|sim")]
    pub driver: String,
    #[command(flatten)]
    pub cpu: CpuArgs,
    #[command(flatten)]
    pub lowering: LoweringArgs,
}

impl BackendArgs {
    /// The parsed choice.
    pub fn choice(&self) -> Result<BackendChoice> {
        BackendChoice::parse(&self.backend, &self.driver).ok_or_else(|| {
            anyhow::anyhow!(
                "--backend must be cpu, ane or ane-sim and --driver ane, e5rt or sim (got {} / {})",
                self.backend,
                self.driver
            )
        })
    }

    /// The backend options with `threads` CPU threads.
    pub fn options(&self, threads: usize) -> Result<BackendOptions> {
        Ok(BackendOptions {
            cpu: self.cpu.options(threads)?,
            lowering: self.lowering.options()?,
            ..BackendOptions::default()
        })
    }
}

/// How the CPU backend runs (the CPU reference of `verify` too).
#[derive(Debug, Args, Clone)]
pub struct CpuArgs {
    /// CPU kernels: the most capable instruction set to use, `best` (whatever
    /// the CPU has: AVX-512 VNNI, AVX-512, AVX2; NEON with i8mm, with
    /// dotprod, plain), `avx512` (AVX-512 without VNNI), `avx2`,
    /// `neon-dotprod` (no i8mm panels), `neon` or `generic` (scalar). A cap
    /// for another architecture means generic. Default: best, or
    /// $ANEDVD_KERNELS when set (an A/B override read when this flag is absent).
    #[arg(long, value_name = "best|avx512|avx2|neon-dotprod|neon|generic")]
    pub isa: Option<String>,
    /// Do not repack Q8_0/Q4_0/Q5_0/IQ4_NL/Q4_K weights (and Q6_K, when the
    /// model fits in the last-level cache) into the AVX-512 VNNI panel layout
    /// at load (the packed layout is faster; unpacked weights are packed per
    /// prefill call). Also set by ANEDVD_PACK=0.
    #[arg(long)]
    pub no_pack: bool,
    /// Keep every position in the KV caches of sliding-window layers (as
    /// llama.cpp's --swa-full). By default they keep their window plus 256
    /// positions, which bounds their memory (15 of Gemma 3's 18 layers) but
    /// means a prompt that diverges further back than that from a cached
    /// one is prefilled again from the start.
    #[arg(long)]
    pub swa_full: bool,
    /// How the KV cache stores keys and values: `f16`, or `q8_0` (ggml's
    /// 8-bit blocks, 34 bytes per 32 values: 53% of f16's memory and of
    /// the bytes attention reads at depth; accuracy in docs/BENCHMARKS.md).
    /// Like llama.cpp's -ctk/-ctv (both at once). Layers whose head width
    /// is no multiple of 32 keep f16.
    #[arg(long, default_value = "f16", value_name = "f16|q8_0")]
    pub cache_type: String,
}

impl CpuArgs {
    /// The CPU options with `threads` threads.
    pub fn options(&self, threads: usize) -> Result<CpuOptions> {
        let mut options = CpuOptions {
            threads,
            ..CpuOptions::default()
        };
        if let Some(name) = &self.isa {
            let Some(isa) = IsaCap::from_name(name) else {
                bail!(
                    "--isa must be best, avx512, avx2, neon-dotprod, neon or generic, not `{name}`"
                );
            };
            options.isa = isa;
        }
        if self.no_pack {
            options.pack = false;
        }
        options.swa_full = self.swa_full;
        options.kv_type = KvType::from_name(&self.cache_type).with_context(|| {
            format!(
                "--cache-type must be f16 or q8_0, not `{}`",
                self.cache_type
            )
        })?;
        Ok(options)
    }
}

/// How the decoder is lowered to ANE programs (the ANE backends only).
#[derive(Debug, Args, Clone)]
pub struct LoweringArgs {
    /// ANE program granularity: `fused` (norms inside, one program per layer,
    /// attention on the host), `split` (q/k/v, output and FFN projections as
    /// separate programs) or `resident` (whole layers with attention and the
    /// KV cache inside, several layers per program; e5rt path only).
    #[arg(long, default_value = "fused", value_name = "fused|split|resident")]
    pub variant: String,
    /// Resident variant: layers per program. Default: as many as keep each
    /// program's weights within 1.5 GB (ANEForge's measured limit), which is
    /// the whole model for Gemma 3 270M.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub ane_layers_per_program: Option<u32>,
    /// With compressed --ane-weights: keep the N projection blocks (a
    /// layer's attention or FFN projections, or the lm_head) that lose the
    /// most when compressed at fp16, measured at load by CPU runs of the
    /// model with one block compressed at a time (`kernels --sensitivity`
    /// lists the ranking). `auto` keeps the fewest weights that bring the
    /// summed measured distance of the blocks left compressed within 2e-4
    /// (predicted logits cosine ≥ 0.9998); it is what keeps int8's greedy
    /// tokens on the CPU's (docs/ane-quantization.md)
    #[arg(long, default_value = "0", value_name = "N|auto", value_parser = KeepFp16::parse)]
    pub ane_keep_fp16: KeepFp16,
    /// Resident variant: positions each layer's resident KV cache holds
    /// (a power of two); caps the context of a session.
    #[arg(long, default_value_t = 1024, value_name = "T")]
    pub ane_context: usize,
    /// ANE activation width W (token columns per dispatch, multiple of 32).
    #[arg(long, default_value_t = 64, value_name = "W")]
    pub width: usize,
    /// Largest ANE lm_head vocabulary slice (≤ 65536).
    #[arg(long, default_value_t = 32768)]
    pub vocab_slice: usize,
    /// Fused ANE variant: the residual crosses the ANE divided by this power
    /// of two (fp16 stops at 65504; Gemma 3 270M residuals reach ~88000).
    #[arg(long, default_value_t = 32.0)]
    pub residual_scale: f32,
    /// ANE projection weights: fp16, int8 (one fp16 scale per output channel,
    /// `constexpr_affine_dequantize`) or palettized lut8|lut6|lut4 (a k-means
    /// palette per 16 output channels, `constexpr_lut_to_dense`). int8 is
    /// contested on the in-memory path and the palettes untested there; both
    /// ops are correct on e5rt (`anedvd ops`; our exact spellings were not
    /// seen on hardware), so simulate them with --ane-path e5rt.
    /// docs/ane-quantization.md has the accuracy table.
    #[arg(long, default_value = "fp16", value_name = "fp16|int8|lut8|lut6|lut4",
          value_parser = clap::builder::PossibleValuesParser::new(WeightFormat::ALL.map(WeightFormat::name)))]
    pub ane_weights: String,
    /// The ANE runtime path the programs are checked against and run on: inmem
    /// (_ANEInMemoryModel; --driver ane) or e5rt (Espresso; --driver e5rt).
    /// --driver sim and --backend ane-sim simulate either.
    #[arg(long, default_value = "inmem", value_name = "inmem|e5rt",
          value_parser = clap::builder::PossibleValuesParser::new(RuntimePath::ALL.map(RuntimePath::name)))]
    pub ane_path: String,
}

impl LoweringArgs {
    /// The parsed lowering options.
    pub fn options(&self) -> Result<LowerOptions> {
        let Some(variant) = Variant::from_name(&self.variant) else {
            bail!(
                "--variant must be `fused`, `split` or `resident`, not `{}`",
                self.variant
            );
        };
        Ok(LowerOptions {
            width: self.width,
            variant,
            vocab_slice: self.vocab_slice,
            residual_scale: self.residual_scale,
            weights: WeightFormat::from_name(&self.ane_weights)
                .ok_or_else(|| anyhow::anyhow!("unknown --ane-weights `{}`", self.ane_weights))?,
            path: RuntimePath::from_name(&self.ane_path)
                .ok_or_else(|| anyhow::anyhow!("unknown --ane-path `{}`", self.ane_path))?,
            layers_per_program: self.ane_layers_per_program.map_or(0, |k| k as usize),
            context: self.ane_context,
            keep_fp16: self.ane_keep_fp16,
            fp16_blocks: Default::default(),
        })
    }
}

impl ModelArgs {
    /// The model path: the flag, $ANEDVD_MODEL, or the default model (an
    /// `hf://` reference is pulled first; see [`resolve_model_path`]).
    pub fn path(&self) -> Result<PathBuf> {
        if let Some(p) = &self.model {
            return resolve_model_path(p);
        }
        if let Some(p) = std::env::var_os("ANEDVD_MODEL") {
            return resolve_model_path(Path::new(&p));
        }
        let dir = std::env::var_os("ANEDVD_MODEL_DIR")
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("models"))
            });
        let Some(dir) = dir else {
            bail!("no --model given and $HOME is unset; pass --model PATH");
        };
        let path = dir.join(DEFAULT_MODEL_FILE);
        if !path.exists() {
            bail!(
                "no --model given and the default model {} is absent; fetch it with \
                 scripts/fetch-model.sh or pass --model PATH",
                path.display()
            );
        }
        Ok(path)
    }

    /// [`ModelArgs::path`], after the --check-tensors scan when the flag is
    /// set (for the commands that open the model without [`Engine::load`]:
    /// verify, check, kernels).
    pub fn path_checked(&self) -> Result<PathBuf> {
        let path = self.path()?;
        if self.check_tensors {
            let bar = ProgressBar::new(0);
            bar.set_style(scan_style());
            bar.set_prefix(path.display().to_string());
            bar.set_message(LoadStage::CheckTensors { done: 0, total: 0 }.describe());
            let scanned = anedvd_engine::tools::check_tensors_at(&path, |done, total| {
                bar.set_length(total);
                bar.set_position(done);
            });
            bar.finish_and_clear();
            scanned.context("--check-tensors")?;
        }
        Ok(path)
    }

    /// The metadata overrides given by the flags.
    pub fn overrides(&self) -> Result<ConfigOverrides> {
        let rope_pairing = match self.rope_pairing.as_deref() {
            None => None,
            Some("norm") => Some(RopePairing::Norm),
            Some("neox") => Some(RopePairing::Neox),
            Some(other) => bail!("--rope-pairing must be `norm` or `neox`, not `{other}`"),
        };
        Ok(ConfigOverrides {
            family: self.family.clone(),
            rope_pairing,
            sliding_window: self.sliding_window,
            n_ctx_train: self.ctx_train,
        })
    }

    /// The chat template given by `--chat-template` or `--chat-template-file`.
    /// A bare word is a built-in's name (a typo is an error listing them);
    /// anything else is Jinja text.
    pub fn template_override(&self) -> Result<Option<TemplateOverride>> {
        if let Some(path) = &self.chat_template_file {
            let size = std::fs::metadata(path)
                .with_context(|| format!("--chat-template-file {}", path.display()))?
                .len();
            if size > MAX_TEMPLATE_FILE_BYTES {
                bail!(
                    "--chat-template-file {}: {size} bytes; a chat template is at most {} bytes",
                    path.display(),
                    MAX_TEMPLATE_FILE_BYTES
                );
            }
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--chat-template-file {}", path.display()))?;
            return Ok(Some(TemplateOverride::Source {
                text,
                from: path.display().to_string(),
            }));
        }
        let Some(given) = &self.chat_template else {
            return Ok(None);
        };
        if let Some(b) = BuiltinTemplate::from_name(given) {
            return Ok(Some(TemplateOverride::Builtin(b)));
        }
        let is_word = !given.is_empty()
            && given
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if is_word {
            let names: Vec<&str> = BuiltinTemplate::ALL.iter().map(|b| b.name()).collect();
            bail!(
                "--chat-template {given}: no built-in template has that name (built-ins: {}); \
                 pass Jinja text, or a file with --chat-template-file",
                names.join(", ")
            );
        }
        Ok(Some(TemplateOverride::Source {
            text: given.clone(),
            from: "--chat-template".into(),
        }))
    }

    /// CPU threads: the flag, else one per logical CPU.
    pub fn threads(&self) -> usize {
        self.threads.unwrap_or_else(default_threads)
    }

    /// How to load the model on `backend`; every flag is checked here.
    pub fn load_options(&self, backend: &BackendArgs) -> Result<LoadOptions> {
        Ok(LoadOptions {
            backend: backend.choice()?,
            backend_options: backend.options(self.threads())?,
            overrides: self.overrides()?,
            check_tensors: self.check_tensors,
            chat_template: self.template_override()?,
        })
    }

    /// Loads the model on `backend` with a spinner on stderr.
    pub fn load(&self, backend: &BackendArgs, quiet: bool) -> Result<Engine> {
        let options = self.load_options(backend)?;
        load_engine(&self.path()?, &options, quiet)
    }
}

/// A model path as given: `hf://ORG/REPO[:FILE|:QUANT]` is pulled from the
/// Hugging Face hub (or found in its cache) and becomes the local path;
/// anything else is a path already.
pub fn resolve_model_path(p: &Path) -> Result<PathBuf> {
    match p.to_str().and_then(anedvd_hub::strip_hf_scheme) {
        Some(spec) => crate::cmd_pull::resolve_hf(spec),
        None => Ok(p.to_path_buf()),
    }
}

/// Loads the model at `path` with a spinner on stderr (none when `quiet`).
pub fn load_engine(path: &Path, options: &LoadOptions, quiet: bool) -> Result<Engine> {
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new_spinner()
    };
    let spinner = ProgressStyle::with_template("{spinner} loading {prefix}: {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner());
    bar.set_style(spinner.clone());
    bar.set_prefix(path.display().to_string());
    bar.enable_steady_tick(Duration::from_millis(100));
    // The spinner becomes a byte bar while --check-tensors scans.
    let mut scanning = false;
    let engine = Engine::load(path, options, |stage: LoadStage| match stage {
        LoadStage::CheckTensors { done, total } => {
            if !scanning {
                scanning = true;
                bar.set_style(scan_style());
                bar.set_length(total);
                bar.set_message(stage.describe());
            }
            bar.set_position(done);
        }
        other => {
            if scanning {
                scanning = false;
                bar.set_style(spinner.clone());
            }
            bar.set_message(other.describe());
        }
    });
    bar.finish_and_clear();
    let engine = engine.context("cannot load the model")?;
    for note in &engine.notes {
        eprintln!("note: {note}");
    }
    Ok(engine)
}

/// The byte bar of the --check-tensors scan.
fn scan_style() -> ProgressStyle {
    ProgressStyle::with_template(
        "{prefix}: {msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
}

/// The error and its causes joined by `: `, skipping a cause whose text the
/// message before it already contains (many library errors quote their source).
pub fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
    }
    out
}

/// Physical cores are what matter for matrix-vector work; without a portable
/// way to count them we use the logical CPU count.
pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Speculative decoding flags shared by `run`, `chat`, `bench` and `serve`.
#[derive(Debug, Args, Clone)]
pub struct SpecArgs {
    /// Speculative decoding. `ngram` (llama.cpp's ngram-simple): after each
    /// token, the tokens that followed the latest earlier occurrence of the
    /// last --spec-n tokens are drafted; `draft`: --draft-model, a smaller
    /// model with the same vocabulary, drafts greedily (stopping when its
    /// top probability drops below --draft-p-min). One batched forward pass checks up
    /// to --spec-m drafts. The output is unchanged (greedy: the same tokens;
    /// sampling: the same distribution); copying and editing text is where
    /// the n-gram proposer is faster.
    #[arg(long, value_name = "ngram|draft")]
    pub spec: Option<String>,
    /// The draft model of --spec draft (a .gguf file, a HF directory or
    /// hf://ORG/REPO[:FILE|:QUANT]).
    #[arg(long, value_name = "PATH")]
    pub draft_model: Option<PathBuf>,
    /// --spec draft: stop drafting when the draft model's top probability
    /// is below this.
    #[arg(long, value_name = "P", default_value_t = anedvd_engine::speculative::DRAFT_P_MIN)]
    pub draft_p_min: f32,
    /// Tokens matched in the history (with --spec; 1-256).
    #[arg(long, value_name = "N", default_value_t = anedvd_engine::speculative::DEFAULT_N)]
    pub spec_n: usize,
    /// Most tokens drafted per verify pass (with --spec; 1-256).
    #[arg(long, value_name = "M", default_value_t = anedvd_engine::speculative::DEFAULT_M)]
    pub spec_m: usize,
}

/// What `--spec` asks for.
pub enum Speculation {
    /// No speculation.
    Off,
    /// The n-gram proposer.
    Ngram(anedvd_engine::speculative::SpecParams),
    /// A draft model drafting up to `params.m` tokens.
    Draft {
        /// The loaded draft model.
        engine: Box<Engine>,
        /// Its settings (proposer `draft`).
        params: anedvd_engine::speculative::SpecParams,
        /// Its probability floor.
        p_min: f32,
    },
}

impl Speculation {
    /// What generation takes: the n-gram settings (for
    /// `GenerateParams::speculative`) or a draft proposer for a session of
    /// `max_seq` positions of the model with `tokenizer`.
    pub fn parts(
        &self,
        tokenizer: &anedvd_engine::Tokenizer,
        max_seq: usize,
    ) -> Result<(
        Option<anedvd_engine::speculative::SpecParams>,
        Option<anedvd_engine::speculative::DraftProposer>,
    )> {
        Ok(match self {
            Speculation::Off => (None, None),
            Speculation::Ngram(p) => (Some(*p), None),
            Speculation::Draft {
                engine,
                params,
                p_min,
            } => (
                None,
                Some(anedvd_engine::speculative::DraftProposer::new(
                    engine, tokenizer, max_seq, params.m, *p_min,
                )?),
            ),
        })
    }
}

impl SpecArgs {
    /// Checks the flags without loading anything: the speculation they ask
    /// for, if any.
    pub fn params(&self) -> Result<Option<anedvd_engine::speculative::SpecParams>> {
        use anedvd_engine::speculative::{DraftProposer, ProposerKind, SpecParams};
        let proposer = match (self.spec.as_deref(), &self.draft_model) {
            (Some("draft"), None) => bail!("--spec draft needs --draft-model PATH"),
            (Some("ngram") | None, Some(_)) => bail!("--draft-model is for --spec draft"),
            (None, None) => return Ok(None),
            (Some("ngram"), None) => ProposerKind::Ngram,
            (Some("draft"), Some(_)) => {
                DraftProposer::check_p_min(self.draft_p_min)?;
                ProposerKind::Draft
            }
            (Some(other), _) => bail!("unknown --spec `{other}`: expected ngram or draft"),
        };
        let p = SpecParams {
            proposer,
            n: self.spec_n,
            m: self.spec_m,
        };
        p.validate().map_err(anyhow::Error::msg)?;
        Ok(Some(p))
    }

    /// Loads the draft model of `--spec draft` (like the model: same
    /// backend and threads, no config overrides), if asked for.
    pub fn load_draft(
        &self,
        model: &ModelArgs,
        backend: &BackendArgs,
        quiet: bool,
    ) -> Result<Option<Engine>> {
        let Some(path) = self.draft_model.as_ref().filter(|_| self.spec.is_some()) else {
            return Ok(None);
        };
        let options = LoadOptions {
            overrides: ConfigOverrides::default(),
            chat_template: None,
            ..model.load_options(backend)?
        };
        let path = resolve_model_path(path)?;
        let engine = load_engine(&path, &options, quiet)
            .with_context(|| format!("loading the draft model {}", path.display()))?;
        Ok(Some(engine))
    }

    /// Resolves the flags, loading the draft model if there is one.
    pub fn resolve(
        &self,
        model: &ModelArgs,
        backend: &BackendArgs,
        quiet: bool,
    ) -> Result<Speculation> {
        use anedvd_engine::speculative::ProposerKind;
        Ok(match self.params()? {
            None => Speculation::Off,
            Some(p) if p.proposer == ProposerKind::Ngram => Speculation::Ngram(p),
            Some(params) => match self.load_draft(model, backend, quiet)? {
                Some(engine) => Speculation::Draft {
                    engine: Box::new(engine),
                    params,
                    p_min: self.draft_p_min,
                },
                None => bail!("--spec draft needs --draft-model PATH"),
            },
        })
    }
}

/// Sampling flags shared by `run` and `chat`.
#[derive(Debug, Args, Clone)]
pub struct SamplingArgs {
    /// Temperature (0 = greedy).
    #[arg(long = "temp", default_value_t = 0.8)]
    pub temperature: f32,
    /// Top-k (0 = off).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Top-p / nucleus (1.0 = off).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Min-p, relative to the most likely token (0 = off).
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Repetition penalty, llama.cpp semantics (1.0 = off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Tokens the penalties look back over (0 = off, -1 = all).
    #[arg(long, default_value_t = 64, allow_negative_numbers = true)]
    pub repeat_last_n: i32,
    /// Presence penalty, OpenAI semantics.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub presence_penalty: f32,
    /// Frequency penalty, OpenAI semantics.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub frequency_penalty: f32,
    /// Random seed (default: random; the seed used is printed with the stats).
    #[arg(long)]
    pub seed: Option<u64>,
}

impl SamplingArgs {
    /// Sampler parameters; validates ranges.
    pub fn params(&self) -> Result<SamplingParams> {
        let p = SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            seed: self.seed.unwrap_or_else(random_seed),
            logit_bias: Vec::new(),
        };
        p.validate().map_err(anyhow::Error::msg)?;
        Ok(p)
    }
}

fn random_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    t ^ (u64::from(std::process::id()) << 32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        model: ModelArgs,
    }

    #[test]
    fn family_help_names_every_family() {
        let cmd = Cli::command();
        let help = cmd
            .get_arguments()
            .find(|a| a.get_id() == "family")
            .and_then(|a| a.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        for name in anedvd_engine::family_names() {
            assert!(help.contains(name), "--family help lacks {name}: {help}");
        }
    }

    #[derive(Parser)]
    struct CpuCli {
        #[command(flatten)]
        cpu: CpuArgs,
    }

    fn cpu_options(args: &[&str]) -> Result<CpuOptions> {
        let cli = CpuCli::try_parse_from(std::iter::once("x").chain(args.iter().copied()))?;
        cli.cpu.options(2)
    }

    #[test]
    fn kv_cache_flags() {
        let default = cpu_options(&[]).unwrap();
        assert_eq!((default.kv_type, default.swa_full), (KvType::F16, false));
        let set = cpu_options(&["--cache-type", "q8_0", "--swa-full"]).unwrap();
        assert_eq!((set.kv_type, set.swa_full), (KvType::Q8_0, true));
        let err = cpu_options(&["--cache-type", "q4_0"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--cache-type must be f16 or q8_0") && err.contains("q4_0"),
            "{err}"
        );
    }

    fn given(args: &[&str]) -> Result<Option<TemplateOverride>> {
        let cli = Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied()))?;
        cli.model.template_override()
    }

    #[test]
    fn chat_template_flags() {
        assert_eq!(given(&[]).unwrap(), None);
        assert_eq!(
            given(&["--chat-template", "chatml"]).unwrap(),
            Some(TemplateOverride::Builtin(BuiltinTemplate::Chatml))
        );
        // Anything but a bare word is Jinja text, as llama-server takes it.
        let text = "{{ messages[0].content }}";
        assert_eq!(
            given(&["--chat-template", text]).unwrap(),
            Some(TemplateOverride::Source {
                text: text.into(),
                from: "--chat-template".into()
            })
        );
        // A bare word that names no built-in is a typo, not a template.
        let err = given(&["--chat-template", "chatm1"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("chatm1") && err.contains("llama3"), "{err}");
        let dir = std::env::temp_dir().join(format!("anedvd-tmpl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("t.jinja");
        std::fs::write(&file, text).unwrap();
        let f = file.to_str().unwrap();
        assert_eq!(
            given(&["--chat-template-file", f]).unwrap(),
            Some(TemplateOverride::Source {
                text: text.into(),
                from: f.into()
            })
        );
        let missing = dir.join("missing.jinja");
        let err = given(&["--chat-template-file", missing.to_str().unwrap()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("missing.jinja"), "{err}");
        assert!(given(&["--chat-template", "chatml", "--chat-template-file", f]).is_err());
        // A file far larger than any template is refused before it is read.
        let huge = dir.join("huge.jinja");
        std::fs::File::create(&huge)
            .unwrap()
            .set_len(MAX_TEMPLATE_FILE_BYTES + 1)
            .unwrap();
        let err = given(&["--chat-template-file", huge.to_str().unwrap()])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("huge.jinja") && err.contains("at most"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// Constrained-decoding flags shared by `run` and `chat` (llama.cpp's
/// names): the output is kept inside a grammar or a JSON schema.
#[derive(Debug, Args, Clone, Default)]
pub struct GrammarArgs {
    /// A GBNF grammar (llama.cpp's format) the output must match.
    #[arg(long, value_name = "GBNF", group = "constraint")]
    pub grammar: Option<String>,
    /// Read the grammar from FILE: GBNF, or llguidance's Lark syntax when the
    /// name ends in `.lark`.
    #[arg(long, value_name = "FILE", group = "constraint")]
    pub grammar_file: Option<PathBuf>,
    /// A JSON schema (as JSON text) the output must be valid against;
    /// `{}` allows any JSON.
    #[arg(short = 'j', long, value_name = "SCHEMA", group = "constraint")]
    pub json_schema: Option<String>,
    /// Read the JSON schema from FILE.
    #[arg(long, value_name = "FILE", group = "constraint")]
    pub json_schema_file: Option<PathBuf>,
}

impl GrammarArgs {
    /// The grammar asked for, compiled for `engine` (`None` without one).
    pub fn compile(
        &self,
        engine: &anedvd_engine::Engine,
    ) -> Result<Option<anedvd_engine::constrain::CompiledGrammar>> {
        use anedvd_engine::constrain::Grammar;
        let read = |p: &Path| {
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
        };
        let schema = |text: &str, origin: &str| -> Result<Grammar> {
            let schema: serde_json::Value = serde_json::from_str(text)
                .with_context(|| format!("{origin} is not valid JSON"))?;
            Ok(Grammar::JsonSchema {
                schema,
                strict: false,
            })
        };
        let grammar = if let Some(g) = &self.grammar {
            Grammar::Gbnf(g.clone())
        } else if let Some(p) = &self.grammar_file {
            let text = read(p)?;
            if p.extension().is_some_and(|e| e == "lark") {
                Grammar::Lark(text)
            } else {
                Grammar::Gbnf(text)
            }
        } else if let Some(s) = &self.json_schema {
            schema(s, "--json-schema")?
        } else if let Some(p) = &self.json_schema_file {
            schema(&read(p)?, &p.display().to_string())?
        } else {
            return Ok(None);
        };
        Ok(Some(engine.compile_grammar(&grammar)?))
    }
}

/// `result`, except that a closed stdout (`anedvd … | head`) is success.
pub fn ignore_broken_pipe(result: Result<()>) -> Result<()> {
    match result {
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            Ok(())
        }
        other => other,
    }
}
