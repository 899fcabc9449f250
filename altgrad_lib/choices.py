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
