"""The valid values of the enumerated settings, one copy each (torch-free, so configs and the CLI import it
cheaply); the modules that implement them validate against these tuples."""

BACKENDS = ("sim", "torchao", "scaled_mm")   # "sim" = our fake quantization; the others cast to real FP8 dtypes
HW_BACKENDS = BACKENDS[1:]
MLP_KINDS = ("gelu", "swiglu")
PRECISIONS = ("fp32", "bf16")
DEVICES = ("auto", "cpu", "cuda")
# Old recipe names that still work, resolved to the canonical name, which is what configs record and print.
# "bf16" quantized nothing and ran in fp32 unless precision="bf16": the autocast dtype is `precision`, not the recipe.
RECIPE_ALIASES = {"bf16": "hp"}
LOGGERS = ("none", "wandb", "tensorboard")    # TrainConfig.logger: experiment-tracking mirror (tracking.py)
RECIPES = ("hp", "fp8_hybrid", "fp8_hybrid_all", "fp8_e4m3", "fmt:<FMT>[:<GRAD_FMT>]")   # quantize.recipes.get_policy
CORPORA = ("licenses", "eurlex", "<path to .txt file or dir>")                          # data.load_corpus
TOKENIZER_ALIASES = {"gpt2-2k": 2048, "gpt2-4k": 4096, "gpt2-8k": 8192}                 # tokenizers
TOKENIZERS = ("gpt2", "gpt2-<N> (first N merges, 256 <= N < 50256)", *TOKENIZER_ALIASES)
# altgrad_lib/optim/
OPTIMIZERS = ("adamw", "stiffness_adamw", "grid_adamw", "madam", "grid_sgd")
STORAGE_MODES = ("fp32", "grid_rne", "grid_sr", "kahan")   # weight storage (optim/storage.py)
STIFFNESS_KINDS = ("ulp", "mantissa")                      # exponent-aware ULP | plain 2^(floor(log2|w|) - M)
ULP_MODES = ("step", "up", "down", "mean")                 # which ULP at a binade edge (numerics/grid.py)
