"""Tokenizers for AltGrad: GPT-2's byte-level BPE (r50k ranks) and truncated small-vocabulary variants.

`get_tokenizer("gpt2")` is the full 50257-token GPT-2 vocabulary. `get_tokenizer("gpt2-4k")` (or "gpt2-4096",
"gpt2-2k", "gpt2-8k", "gpt2-<N>") keeps only the first N merge ranks plus `<|endoftext|>` at id N, which is
still a valid BPE (every rank-r token is built from tokens of rank < r), needs no training, and gives the same
ids as GPT-2 for common words — a cheap vocabulary for CPU-sized models.

The r50k ranks are loaded, in order, from: the copy shipped inside the `openai-whisper` wheel (installed with
`--no-deps`; only the asset file is read, whisper itself is never imported), tiktoken's own download cache,
and only when not offline, tiktoken's download. All three are sha256-checked against the hash tiktoken itself
expects for r50k_base.
"""
from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import re
import tempfile
from functools import lru_cache
from pathlib import Path

import tiktoken

# Same string as tiktoken_ext.openai_public.r50k_base(); tests check the two stay equal.
R50K_URL = "https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken"
R50K_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
R50K_PAT_STR = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
N_MERGEABLE_GPT2 = 50256  # ranks 0..50255; <|endoftext|> is 50256
ENDOFTEXT = "<|endoftext|>"
DEFAULT_TOKENIZER = "gpt2-4k"
from altgrad_lib.choices import TOKENIZER_ALIASES  # noqa: E402  (re-exported)
OFFLINE_ENV_VARS = ("ALTGRAD_OFFLINE", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
_NAME_RE = re.compile(r"^gpt2-(\d+)(k?)$")


def is_offline() -> bool:
    """True when any of ALTGRAD_OFFLINE / HF_HUB_OFFLINE / HF_DATASETS_OFFLINE is set to a truthy value."""
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on") for v in OFFLINE_ENV_VARS)


def _parse_ranks(data: bytes, source: str) -> dict[bytes, int]:
    # Same text format as tiktoken's load_tiktoken_bpe ("<base64 token> <rank>" per line). We parse here
    # instead of calling it with a local path because that call also writes a copy into tiktoken's cache.
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    if len(ranks) != N_MERGEABLE_GPT2:
        raise ValueError(f"{source}: expected {N_MERGEABLE_GPT2} ranks, found {len(ranks)}")
    return ranks


def whisper_ranks_path() -> Path | None:
    """Path of `whisper/assets/gpt2.tiktoken` from the installed openai-whisper wheel, without importing it."""
    spec = importlib.util.find_spec("whisper")
    if spec is None:
        return None
    for loc in spec.submodule_search_locations or []:
        p = Path(loc) / "assets" / "gpt2.tiktoken"
        if p.is_file():
            return p
    return None


def tiktoken_cache_path() -> Path:
    """Where tiktoken caches the r50k ranks (mirrors tiktoken.load.read_file_cached's key scheme)."""
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    if not cache_dir:
        cache_dir = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    return Path(cache_dir) / hashlib.sha1(R50K_URL.encode()).hexdigest()


@lru_cache(maxsize=1)
def load_r50k_ranks() -> tuple[dict[bytes, int], str]:
    """The GPT-2 (r50k_base) merge ranks and a description of where they came from."""
    problems: list[str] = []
    for label, path in (("openai-whisper asset", whisper_ranks_path()), ("tiktoken cache", tiktoken_cache_path())):
        if path is None or not path.is_file():
            problems.append(f"{label}: not found")
            continue
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if digest != R50K_SHA256:
            problems.append(f"{label} {path}: sha256 {digest} != expected {R50K_SHA256}")
            continue
        return _parse_ranks(data, str(path)), f"{label} ({path})"
    if not is_offline():
        try:
            from tiktoken.load import load_tiktoken_bpe

            return load_tiktoken_bpe(R50K_URL, expected_hash=R50K_SHA256), f"download ({R50K_URL})"
        except Exception as e:  # network errors come in many types; report them all the same way
            problems.append(f"download: {type(e).__name__}: {e}")
    else:
        problems.append("download: skipped (offline: one of " + ", ".join(OFFLINE_ENV_VARS) + " is set)")
    raise RuntimeError(
        "GPT-2 BPE ranks not available. Install the offline copy with `pip install --no-deps openai-whisper` "
        "(only its assets/gpt2.tiktoken is used). Tried: " + "; ".join(problems)
    )


def parse_tokenizer_name(name: str) -> int | None:
    """Number of mergeable ranks kept for `name` (None = full gpt2). Raises ValueError on bad names."""
    key = name.strip().lower()
    if key in ("gpt2", "r50k", "r50k_base"):
        return None
    if key in TOKENIZER_ALIASES:
        return TOKENIZER_ALIASES[key]
    m = _NAME_RE.match(key)
    if m is None:
        raise ValueError(
            f"unknown tokenizer {name!r}; valid: 'gpt2' (full 50257), 'gpt2-<N>' with 256 <= N <= "
            f"{N_MERGEABLE_GPT2 - 1}, or aliases {sorted(TOKENIZER_ALIASES)}"
        )
    n = int(m.group(1)) * (1024 if m.group(2) else 1)
    if not 256 <= n < N_MERGEABLE_GPT2:
        raise ValueError(
            f"tokenizer {name!r}: N={n} out of range; need 256 <= N <= {N_MERGEABLE_GPT2 - 1} "
            f"(256 byte tokens are the minimum; use 'gpt2' for the full vocabulary)"
        )
    return n


def canonical_tokenizer_name(name: str) -> str:
    """'gpt2' or 'gpt2-<N>' with N spelled out (so 'gpt2-4k' and 'gpt2-4096' share a token cache)."""
    n = parse_tokenizer_name(name)
    return "gpt2" if n is None else f"gpt2-{n}"


@lru_cache(maxsize=16)
def _build(canonical: str) -> tiktoken.Encoding:
    n = parse_tokenizer_name(canonical)
    ranks, _ = load_r50k_ranks()
    if n is None:
        return tiktoken.Encoding(
            name="gpt2", pat_str=R50K_PAT_STR, mergeable_ranks=ranks,
            special_tokens={ENDOFTEXT: N_MERGEABLE_GPT2}, explicit_n_vocab=N_MERGEABLE_GPT2 + 1,
        )
    small = {tok: r for tok, r in ranks.items() if r < n}
    return tiktoken.Encoding(
        name=canonical, pat_str=R50K_PAT_STR, mergeable_ranks=small,
        special_tokens={ENDOFTEXT: n}, explicit_n_vocab=n + 1,
    )


def get_tokenizer(name: str = DEFAULT_TOKENIZER) -> tiktoken.Encoding:
    """A tiktoken Encoding: 'gpt2' (vocab 50257) or 'gpt2-<N>' / 'gpt2-4k' (vocab N+1, EOT id N)."""
    return _build(canonical_tokenizer_name(name))


def uniform_loss(name: str = DEFAULT_TOKENIZER) -> float:
    """ln(V) nats/token: the cross-entropy of a uniform guess over the tokenizer's real vocabulary (V = n_vocab; the
    model's padded rows are dropped before the loss, so they never count). A finished run whose validation loss is
    above it learned nothing (studies/results.run_status calls it `did_not_learn`)."""
    import math

    return math.log(get_tokenizer(name).n_vocab)
