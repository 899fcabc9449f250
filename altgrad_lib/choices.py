"""The valid values of the enumerated settings, one copy each (torch-free, so configs and the CLI import it
cheaply); the modules that implement them validate against these tuples (errors.check_choice, which suggests a
near one). unalias_recipe: the one place a recipe alias becomes its recipe."""

BACKENDS = ("sim", "torchao", "scaled_mm")   # "sim" = our fake quantization; the others cast to real FP8 dtypes
HW_BACKENDS = BACKENDS[1:]
MLP_KINDS = ("gelu", "swiglu")
PRECISIONS = ("fp32", "bf16")
DEVICES = ("auto", "cpu", "cuda")
COMPILE_SCOPES = ("model", "blocks")    # TrainConfig.compile_scope: what torch.compile compiles (model.compile_gpt)
# Old recipe names that still work, resolved to the canonical name, which is what configs record and print.
# "bf16" quantized nothing and ran in fp32 unless precision="bf16": the autocast dtype is `precision`, not the recipe.
RECIPE_ALIASES = {"bf16": "hp"}
LOGGERS = ("none", "wandb", "tensorboard")    # TrainConfig.logger: experiment-tracking mirror (tracking.py)
NAMED_RECIPES = ("hp", "fp8_hybrid", "fp8_hybrid_all", "fp8_e4m3")                       # quantize.recipes.get_policy
# The block-recipe registry, torch-free half: recipe name -> its ':'-switches, in canonical order (what each does:
# quantize/block_recipes.py, whose BUILDERS is the other half, one builder per name; a test checks they match)
BLOCK_SWITCHES = {
    "nvfp4": ("disable_rht", "disable_sr", "disable_2d", "sr_headroom", "wgrad_hp", "hp_attn", "four_over_six",
              "mxfp8_attn", "sr_x", "sr_w", "rht_fprop", "rht_dgrad", "rht_per_step", "sr_per_call", "hp_last=<N>"),
    "mxfp4": ("disable_rht", "disable_sr", "rceil", "sr_headroom", "wgrad_hp", "hp_attn", "mxfp8_attn", "sr_x", "sr_w",
              "rht_fprop", "rht_dgrad", "rht_per_step", "sr_per_call", "hp_last=<N>"),
    "mxfp8": ("rceil", "wgrad_hp", "hp_attn", "mxfp8_attn", "hp_last=<N>"),
    "mxfp6": ("rceil", "wgrad_hp", "hp_attn", "mxfp8_attn", "hp_last=<N>"),
    "fp8_blockwise": ("pow2_scales", "wgrad_hp", "hp_attn", "mxfp8_attn", "hp_last=<N>"),
    "mxint8": ("rceil", "wgrad_hp", "hp_attn", "mxfp8_attn", "hp_last=<N>"),
    "nvint4": ("disable_rht", "rht_all", "disable_sr", "disable_2d", "sr_headroom", "wgrad_hp", "hp_attn", "mxfp8_attn",
               "rht_per_step", "sr_per_call", "hp_last=<N>"),
    "amdfp4": ("disable_rht", "disable_sr", "disable_2d", "sr_headroom", "wgrad_hp", "hp_attn", "mxfp8_attn",
               "rht_per_step", "sr_per_call", "hp_last=<N>"),
    "quartet2_nvidia": ("disable_rht", "disable_sr", "disable_sr_scale", "disable_2d", "four_over_six", "wgrad_hp",
                        "hp_attn", "mxfp8_attn", "rht_per_step", "sr_per_call", "hp_last=<N>"),
    "tetrajet_v2": ("disable_rht", "disable_sr", "disable_sr_scale", "wgrad_hp", "hp_attn", "mxfp8_attn",
                    "rht_per_step", "sr_per_call", "hp_last=<N>"),
    "fp4_all_the_way": ("disable_sr", "wgrad_hp", "hp_attn", "mxfp8_attn", "sr_per_call", "hp_last=<N>"),
}
BLOCK_RECIPES = tuple(BLOCK_SWITCHES)                                                    # quantize.block_recipes
# names users write for a block recipe with switches; recorded under the canonical spelling (mxfp8_rceil: the 8-bit
# MX baseline with RCEIL scales, arXiv 2506.08027)
BLOCK_RECIPE_ALIASES = {"mxfp8_rceil": "mxfp8:rceil"}
# RNG policy of each randomized technique (replicas of one recipe differ in their randomness)
SR_RNG = ("per_quantizer", "per_call")    # QuantSpec.sr_rng: one seeded stream per Quantizer | keyed (step, call)
RHT_RNG = ("fixed", "per_step")           # GemmOptions.rht_rng: one sign vector per layer (TE) | re-drawn per step
# every seed (TrainConfig.seed, a study's seeds, `--seed` flags): what the training loop's np.random.seed takes
SEED_RANGE = (0, 2**32 - 1)
RECIPES = (*NAMED_RECIPES, "fmt:<FMT>[:<GRAD_FMT>]", *(f"{b}[:<switch>...]" for b in BLOCK_RECIPES),
           *BLOCK_RECIPE_ALIASES,
           "<any of these>[:hp_first=<N>][:hp_last=<N>][:hp_layers=<block|module>+...]")   # quantize.recipes
# TrainConfig.precision_schedule keys -> the GEMMs they put in high precision from their step on (GemmOptions.hp_gemms)
SCHEDULE_GEMMS = {"fwd_hp_from": ("fprop",), "bwd_hp_from": ("dgrad", "wgrad")}                # training.schedules
CORPORA = ("licenses", "eurlex", "<path to .txt file or dir>")                          # data.load_corpus
TOKENIZER_ALIASES = {"gpt2-2k": 2048, "gpt2-4k": 4096, "gpt2-8k": 8192}                 # tokenizers
TOKENIZERS = ("gpt2", "gpt2-<N> (first N merges, 256 <= N < 50256)", *TOKENIZER_ALIASES)
# altgrad_lib/optim/
OPTIMIZERS = ("adamw", "stiffness_adamw", "grid_adamw", "madam", "grid_sgd", "muon", "manifold_muon")
MUON_ADJUST_LR = ("original", "match_rms_adamw", "none")   # Muon's shape-dependent lr factor (optim/muon.py)
CONSTRAINTS = ("none", "hypersphere", "stiefel")       # optim.constraint: the matrices' manifold (optim/constraints)
MSIGN_METHODS = ("polar", "ns")                        # manifold_muon's msign: SVD | Newton–Schulz (numerics/matrix)
STORAGE_MODES = ("fp32", "grid_rne", "grid_sr", "kahan", "error_feedback", "error_feedback_sr")   # optim/storage.py
EF_MODES = ("error_feedback", "error_feedback_sr")         # the residual goes into Adam's m (optim/error_feedback.py)
SR_MODES = ("grid_sr", "error_feedback_sr")                 # stored with stochastic rounding: what optim.sr_bits sets
SR_BITS_MAX = 62                           # optim.sr_bits in [1, 62]: numerics/counter_rng.hash_bits draws at most 62
MASTER_MODES = ("fp32", "kahan")           # a latent weight below the grid: what osc_reset moves (optim/osc_reset.py)
STIFFNESS_KINDS = ("ulp", "mantissa")                      # exponent-aware ULP | plain 2^(floor(log2|w|) - M)
ULP_MODES = ("step", "up", "down", "mean")                 # which ULP at a binade edge (numerics/grid.py)
STATE_TRANSFORMS = ("none", "sqrt", "expand")   # optim/state_codec.py: low-precision Adam states
STATE_SCALES = ("pow2", "amax")                 # their block scale (optim/lowp_state.py)


def unalias_recipe(name: str) -> str:
    """The recipe an alias at the head of `name` stands for, the ':'-switches after it kept ('bf16' -> 'hp',
    'MXFP8_RCEIL:hp_last=1' -> 'mxfp8:rceil:hp_last=1'); any other name unchanged. The one place an alias becomes
    its recipe (quantize.recipes.canonical_recipe then spells the whole recipe canonically); block-recipe names
    are case-insensitive, as block_recipes parses them."""
    head, sep, rest = name.partition(":")
    target = RECIPE_ALIASES.get(head.strip()) or BLOCK_RECIPE_ALIASES.get(head.strip().lower())
    return target + sep + rest if target else name
