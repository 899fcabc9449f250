"""The valid values of the enumerated settings, one copy each (torch-free, so configs and the CLI import it
cheaply); the modules that implement them validate against these tuples."""

BACKENDS = ("sim", "torchao", "scaled_mm")   # "sim" = our fake quantization; the others cast to real FP8 dtypes
HW_BACKENDS = BACKENDS[1:]
MLP_KINDS = ("gelu", "swiglu")
PRECISIONS = ("fp32", "bf16")
DEVICES = ("auto", "cpu", "cuda")
LOGGERS = ("none", "wandb", "tensorboard")    # TrainConfig.logger: experiment-tracking mirror (tracking.py)
