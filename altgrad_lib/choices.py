"""The valid values of the enumerated settings, one copy each (torch-free, so configs and the CLI import it
cheaply); the modules that implement them validate against these tuples."""

BACKENDS = ("sim", "torchao", "scaled_mm")   # "sim" = our fake quantization; the others cast to real FP8 dtypes
HW_BACKENDS = BACKENDS[1:]
MLP_KINDS = ("gelu", "swiglu")
PRECISIONS = ("fp32", "bf16")
DEVICES = ("auto", "cpu", "cuda")
RECIPES = ("bf16", "fp8_hybrid", "fp8_hybrid_all", "fp8_e4m3", "fmt:<FMT>[:<GRAD_FMT>]")   # surgery.get_policy
CORPORA = ("licenses", "eurlex", "<path to .txt file or dir>")                          # data.load_corpus
TOKENIZER_ALIASES = {"gpt2-2k": 2048, "gpt2-4k": 4096, "gpt2-8k": 8192}                 # tokenizers
TOKENIZERS = ("gpt2", "gpt2-<N> (first N merges, 256 <= N < 50256)", *TOKENIZER_ALIASES)
