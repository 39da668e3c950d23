//! Loads a transformers causal-LM directory (GPT-2 or Llama: `config.json` and
//! `model.safetensors`) and prints a continuation of a prompt: greedy by default, or
//! sampled with `--temperature`, `--top-k`, `--top-p` and `--seed`, with the key/value
//! cache (or without, `--no-cache`). `--bench N` times N generations and prints tokens/s.
//!
//! A directory with a `tokenizer.json` takes the prompt as text and streams the text as
//! it decodes (transformers' tokenizer, `nn_models::tokenizer`); byte-level models
//! (vocabulary 256, as `gpt2_finetune` writes) take text too; any model takes
//! `--prompt-ids` and then prints ids.
//!
//! ```text
//! cargo run --release -p nn-examples --bin gpt2_finetune
//! cargo run --release -p nn-examples --bin generate -- out/gpt2_finetuned --prompt "It is a truth"
//! ```

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use nn_models::generation::{generate, generate_streaming, CausalLm, GenerationConfig, Sampling};
use nn_models::gpt2::Gpt2LMHeadModel;
use nn_models::llama::LlamaForCausalLM;
use nn_models::tokenizer::Tokenizer;

#[derive(Parser)]
#[command(about = "Text generation with a GPT-2 or Llama transformers directory")]
struct Args {
    /// The model directory (config.json, model.safetensors).
    model_dir: PathBuf,
    /// The prompt, as text (a directory with tokenizer.json, or a byte-level model; give
    /// this or `--prompt-ids`, not both).
    #[arg(long, default_value = "It is a truth universally acknowledged", conflicts_with = "prompt_ids")]
    prompt: String,
    /// The prompt as token ids, comma-separated (any vocabulary).
    #[arg(long, value_delimiter = ',')]
    prompt_ids: Option<Vec<i64>>,
    /// Tokens to add.
    #[arg(long, default_value_t = 100)]
    max_new_tokens: usize,
    /// Sample at this temperature (greedy without it).
    #[arg(long)]
    temperature: Option<f64>,
    /// Sample among the k most likely tokens.
    #[arg(long)]
    top_k: Option<usize>,
    /// Sample among the most likely tokens reaching this probability.
    #[arg(long)]
    top_p: Option<f64>,
    /// Seed of the sampling (default 0; only with `--temperature`, `--top-k` or `--top-p`:
    /// greedy decoding draws nothing).
    #[arg(long)]
    seed: Option<u64>,
    /// Recompute the whole sequence for every token.
    #[arg(long)]
    no_cache: bool,
    /// Time this many generations and print tokens per second.
    #[arg(long)]
    bench: Option<usize>,
}

fn run(model: &impl CausalLm, vocab: usize, args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let tokenizer = match args.model_dir.join("tokenizer.json").is_file() {
        true => {
            let t = Tokenizer::from_dir(&args.model_dir)?;
            t.check_vocab(vocab)?;
            Some(t)
        }
        false => None,
    };
    let bytes = vocab == 256 && tokenizer.is_none();
    let prompt: Vec<i64> = match (&args.prompt_ids, &tokenizer) {
        (Some(ids), _) => ids.clone(),
        (None, Some(t)) => t.try_encode(&args.prompt)?,
        (None, None) if bytes => args.prompt.bytes().map(i64::from).collect(),
        (None, None) => {
            return Err(format!(
                "the vocabulary has {vocab} tokens and the directory no tokenizer.json: pass --prompt-ids"
            )
            .into())
        }
    };
    let sampling = match (args.temperature, args.top_k, args.top_p) {
        (None, None, None) => Sampling::Greedy,
        (t, top_k, top_p) => Sampling::Sample { temperature: t.unwrap_or(1.0), top_k, top_p },
    };
    let config = GenerationConfig {
        max_new_tokens: args.max_new_tokens,
        sampling,
        eos_token_id: tokenizer.as_ref().and_then(Tokenizer::eos_token_id),
        ignore_eos: false,
        use_cache: !args.no_cache,
    };
    nn_core::manual_seed(args.seed.unwrap_or(0));
    match (&tokenizer, args.prompt_ids.is_some()) {
        (Some(t), false) => {
            // The prompt, then each new character as it completes.
            use std::io::Write;
            print!("{}", args.prompt);
            let mut stream = t.decode_stream();
            generate_streaming(model, &prompt, &config, |id| {
                if let Some(text) = stream.step(id)? {
                    print!("{text}");
                    std::io::stdout().flush().ok();
                }
                Ok(())
            })?;
            println!();
        }
        _ => {
            let tokens = generate(model, &prompt, &config)?;
            if bytes {
                let text: Vec<u8> = tokens.iter().map(|&t| t as u8).collect();
                println!("{}", String::from_utf8_lossy(&text));
            } else {
                println!("{tokens:?}");
            }
        }
    }
    if let Some(n) = args.bench {
        // Every run makes all `max_new_tokens` (the rate counts them), past any eos token.
        let config = GenerationConfig { ignore_eos: true, ..config };
        let start = Instant::now();
        for _ in 0..n {
            generate(model, &prompt, &config)?;
        }
        let s = start.elapsed().as_secs_f64();
        println!(
            "bench: {:.1} tokens/s ({n} x {} new tokens after a {}-token prompt, cache {}, {:.2} s)",
            (n * args.max_new_tokens) as f64 / s,
            args.max_new_tokens,
            prompt.len(),
            if args.no_cache { "off" } else { "on" },
            s
        );
    }
    Ok(())
}

/// An error when `--seed` is given for greedy decoding, which draws no random number: the
/// seed would be ignored, and two runs that differ only in it print the same text.
fn refuse_seed_when_greedy(args: &Args) -> Result<(), String> {
    let greedy = args.temperature.is_none() && args.top_k.is_none() && args.top_p.is_none();
    match args.seed {
        Some(seed) if greedy => Err(format!(
            "--seed {seed} seeds sampling, but without --temperature, --top-k or --top-p decoding is greedy and \
             draws nothing (the seed would be ignored); add a sampling flag, or drop --seed"
        )),
        _ => Ok(()),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    // Before reading the model: a flag that would be ignored is refused at once.
    refuse_seed_when_greedy(&args)?;
    // Which model the directory holds: its config is read as `from_pretrained` reads it (a
    // regular file of bounded size, no key given twice), which then checks it whole.
    let config_path = args.model_dir.join("config.json");
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", config_path.display());
    let (file, len) = nn_core::io::open_regular(&config_path).map_err(|e| e.to_string())?;
    if len > 16 << 20 {
        return Err(at(&format_args!("{len} bytes, more than a config's 16 MiB")).into());
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::Read::take(file, 16 << 20), &mut text).map_err(|e| at(&e))?;
    nn_core::serialization::check_unique_keys(&text).map_err(|e| at(&e))?;
    let config: serde_json::Value = serde_json::from_str(&text).map_err(|e| at(&e))?;
    match config["model_type"].as_str() {
        Some("gpt2") => {
            let model = Gpt2LMHeadModel::from_pretrained(&args.model_dir)?;
            run(&model, CausalLm::vocab_size(&model), &args)
        }
        Some("llama") => {
            let model = LlamaForCausalLM::from_pretrained(&args.model_dir)?;
            run(&model, CausalLm::vocab_size(&model), &args)
        }
        other => {
            Err(format!("{}: model_type {other:?}; this example runs \"gpt2\" and \"llama\"", args.model_dir.display())
                .into())
        }
    }
}
