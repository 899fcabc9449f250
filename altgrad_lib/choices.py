"""The valid values of the enumerated settings, one copy each (torch-free, so configs and the CLI import it
cheaply); the modules that implement them validate against these tuples."""

BACKENDS = ("sim", "torchao", "scaled_mm")   # "sim" = our fake quantization; the others cast to real FP8 dtypes
HW_BACKENDS = BACKENDS[1:]
MLP_KINDS = ("gelu", "swiglu")
PRECISIONS = ("fp32", "bf16")
DEVICES = ("auto", "cpu", "cuda")
# altgrad_lib/optim/
OPTIMIZERS = ("adamw", "stiffness_adamw", "grid_adamw", "madam", "grid_sgd")
STORAGE_MODES = ("fp32", "grid_rne", "grid_sr", "kahan")   # weight storage (optim/storage.py)
STIFFNESS_KINDS = ("ulp", "mantissa")                      # exponent-aware ULP | the seed's 2^(floor(log2|w|) - M)
ULP_MODES = ("step", "up", "down", "mean")                 # which ULP at a binade edge (optim/grid.py)
