"""Data for AltGrad: named text corpora, a memory-mapped token cache, and deterministic batches.

Corpora (`load_corpus(name)` -> `datasets.DatasetDict` with splits "train"/"validation", field "text"):
- "licenses" (offline default): the ScanCode LicenseDB licence texts shipped in the PyPI package
  `licensedcode-data`. Front matter stripped; non-English, deprecated, very short and exact-duplicate texts
  dropped; split ~5% validation by licence *family* (gpl-2.0, gpl-3.0-plus -> "gpl") so near-identical
  versions of one licence never straddle the split.
  Credit: ScanCode LicenseDB data, Copyright (c) nexB Inc. and others, CC-BY-4.0
  (https://creativecommons.org/licenses/by/4.0/legalcode; https://github.com/nexB/scancode-toolkit).
- "eurlex": MultiEURLEX English (`coastalcph/multi_eurlex`, config "en", CC-BY-SA-4.0), falling back to
  LexGLUE `coastalcph/lex_glue` config "eurlex" (CC-BY-4.0). Needs the Hugging Face Hub (or its local cache).
- a path to a .txt file or a directory of .txt files.

`TokenCorpus.build(corpus, tokenizer)` tokenizes once per (corpus, tokenizer, content hash) into
`$ALTGRAD_CACHE` (default ~/.cache/altgrad/tokens/) as train.bin / val.bin / meta.json and memory-maps them;
`get_batch(split, B, T, seed, step)` depends only on its arguments, so a resumed run sees the same data.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import re
import socket
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from altgrad_lib.choices import CORPORA   # re-exported (__all__)
from altgrad_lib.io import atomic_file, atomic_write_text
from altgrad_lib.paths import slug
from altgrad_lib.training.progress import progress_bar
from altgrad_lib.training.sub_configs import DataConfig
from altgrad_lib.training.tokenizers import DEFAULT_TOKENIZER, canonical_tokenizer_name, get_tokenizer, is_offline

__all__ = [
    "CORPORA", "CORPUS_CREDITS", "DEFAULT_CORPUS", "DEFAULT_TOKENIZER", "VAL_SEED", "TokenCorpus", "corpus_stats",
    "get_tokenizer", "license_family", "load_corpus",
]

DEFAULT_CORPUS = "licenses"
CORPUS_CREDITS = {
    "licenses": (
        "ScanCode LicenseDB licence texts (PyPI licensedcode-data). Copyright (c) nexB Inc. and others. "
        "ScanCode is a trademark of nexB Inc. SPDX-License-Identifier: CC-BY-4.0 "
        "(https://creativecommons.org/licenses/by/4.0/legalcode). https://github.com/nexB/scancode-toolkit"
    ),
    "eurlex": (
        "MultiEURLEX (Chalkidis, Fergadiotis, Androutsopoulos, EMNLP 2021), HF coastalcph/multi_eurlex, "
        "CC-BY-SA-4.0; fallback LexGLUE eurlex (Chalkidis et al., ACL 2022), HF coastalcph/lex_glue, CC-BY-4.0. "
        "Source documents: EUR-Lex, (c) European Union."
    ),
}
VAL_FRACTION = 0.05
MIN_CHARS = 100  # licence texts shorter than this are mostly stubs ("see LICENSE file")
CACHE_FORMAT = 1  # bump when the on-disk layout or tokenization changes
SPLITS = ("train", "val")
VAL_SEED = 0  # val batches are the same for every run, so val/loss is comparable across seeds and recipes
_SPLIT_ALIASES = {"train": "train", "val": "val", "validation": "val"}
_VERSION_TOKEN = re.compile(r"^v?\d+(\.\d+)*[a-z]?$")
_SUFFIXES = ("-only", "-or-later", "-plus", "+")
_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?)(?:\n---[ \t]*(?:\n|\Z))(.*)\Z", re.S)


# ------------------------------------------------------------------------------------------------- corpora

def _import_datasets():
    # datasets pulls in tqdm.auto, which warns "IProgress not found" in every notebook kernel without
    # ipywidgets; our own bars are text bars there (progress.py), so the warning is only noise.
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="IProgress not found")
        import datasets
    return datasets

def _stable_unit(s: str) -> float:
    """Deterministic hash of s mapped to [0, 1) (Python's hash() is salted per process)."""
    return int.from_bytes(hashlib.sha256(s.encode()).digest()[:8], "little") / 2**64


def _norm_ws(text: str) -> str:
    return " ".join(text.split())


def license_family(key: str) -> str:
    """Licence key with version and -only/-or-later/-plus suffixes dropped: 'gpl-3.0-plus' -> 'gpl'.

    Everything from the first version-like token on is cut ('bsd-3-clause' -> 'bsd', 'cc-by-sa-4.0' ->
    'cc-by-sa'), which groups near-duplicate texts a bit more aggressively than needed — the safe side.
    """
    k = key.strip().lower()
    changed = True
    while changed:
        changed = False
        for suf in _SUFFIXES:
            if k.endswith(suf) and len(k) > len(suf):
                k, changed = k[: -len(suf)], True
    parts = k.split("-")
    for i, p in enumerate(parts):
        if i > 0 and _VERSION_TOKEN.match(p):
            return "-".join(parts[:i])
    return k


def licenses_dir() -> Path:
    """The `licensedcode/data/licenses` directory of the installed licensedcode-data package."""
    spec = importlib.util.find_spec("licensedcode")
    for loc in (spec.submodule_search_locations or []) if spec else []:
        p = Path(loc) / "data" / "licenses"
        if p.is_dir():
            return p
    raise RuntimeError("licence texts not found: `pip install licensedcode-data` (ScanCode LicenseDB, CC-BY-4.0)")


def _parse_license_file(path: Path) -> tuple[dict[str, Any], str]:
    raw = path.read_text(encoding="utf-8")
    m = _FRONT_MATTER.match(raw)
    if m is None:
        return {}, raw
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    meta = yaml.load(m.group(1), Loader=loader) or {}
    return (meta if isinstance(meta, dict) else {}), m.group(2)


@lru_cache(maxsize=2)  # parsing thousands of files is slow; datasets ops return new objects, so sharing is safe
def _load_licenses(val_fraction: float = VAL_FRACTION):
    datasets = _import_datasets()

    rows: dict[str, list[dict[str, str]]] = {"train": [], "validation": []}
    seen: set[str] = set()
    for path in sorted(licenses_dir().glob("*.LICENSE")):
        meta, body = _parse_license_file(path)
        key = str(meta.get("key") or path.stem)
        if str(meta.get("language", "en")).lower() not in ("en", "en-us", "en-gb"):
            continue
        if meta.get("is_deprecated") in (True, "yes", "true"):
            continue
        text = body.strip()
        norm = _norm_ws(text)
        if len(norm) < MIN_CHARS or norm in seen:
            continue
        seen.add(norm)
        fam = license_family(key)
        split = "validation" if _stable_unit("licenses-family:" + fam) < val_fraction else "train"
        rows[split].append({"text": text, "key": key, "family": fam})
    return datasets.DatasetDict({s: datasets.Dataset.from_list(r) for s, r in rows.items()})


def _hub_unavailable(tried: list[str]) -> RuntimeError:
    return RuntimeError(
        "corpus 'eurlex' needs the Hugging Face Hub (or a copy already in the HF datasets cache), which is not "
        "reachable here. Offline alternatives: corpus='licenses' (bundled ScanCode licence texts) or a local "
        "path to a .txt file / directory of .txt files. Tried: " + " | ".join(tried)
    )


def _hub_reachable(timeout: float = 3.0) -> bool:
    # A quick TCP probe so a box without internet fails at once instead of sitting in HTTP retries.
    try:
        socket.create_connection(("huggingface.co", 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _load_eurlex():
    datasets = _import_datasets()

    offline = is_offline()
    if not offline and not _hub_reachable():
        raise _hub_unavailable(["huggingface.co:443 unreachable (network error)"])
    if offline and not datasets.config.HF_HUB_OFFLINE:
        # `datasets` fixes its offline flag at import; without it load_dataset would still go to the network.
        raise _hub_unavailable(["offline requested, but `datasets` was imported without HF_DATASETS_OFFLINE=1/"
                                "HF_HUB_OFFLINE=1 (set them before starting Python to read the HF cache)"])
    # Offline mode still lets `datasets` read its local cache, and it fails immediately when nothing is cached.
    attempts = [
        ("coastalcph/multi_eurlex[en]", lambda: datasets.load_dataset("coastalcph/multi_eurlex", "en")),
        ("multi_eurlex en/*.parquet", lambda: datasets.load_dataset("parquet", data_files={
            s: f"hf://datasets/coastalcph/multi_eurlex/en/{s}-*.parquet" for s in ("train", "validation")})),
        ("coastalcph/lex_glue[eurlex]", lambda: datasets.load_dataset("coastalcph/lex_glue", "eurlex")),
    ]
    tried: list[str] = []
    for label, fn in attempts:
        try:
            dd = fn()
        except Exception as e:  # hub/offline/script errors vary by datasets version
            tried.append(f"{label}: {type(e).__name__}: {str(e)[:200]}")
            continue
        return datasets.DatasetDict({s: dd[s].select_columns(["text"]) for s in ("train", "validation")})
    raise _hub_unavailable(tried)


def _load_text_path(path: Path, val_fraction: float = VAL_FRACTION):
    datasets = _import_datasets()

    files = [path] if path.is_file() else sorted(path.rglob("*.txt"))
    if not files:
        raise ValueError(f"no .txt files under {path}")
    if len(files) >= 2:
        # Whole files go to one split: the ~val_fraction files with the smallest stable hash of their name.
        rel = sorted(files, key=lambda f: _stable_unit(str(f.relative_to(path))))
        n_val = max(1, round(val_fraction * len(files)))
        val = set(rel[:n_val])
        rows = {s: [{"text": f.read_text(encoding="utf-8", errors="replace")} for f in files
                    if (f in val) == (s == "validation")]
                for s in ("train", "validation")}
    else:
        # One file: the last ~val_fraction of its lines is validation (a contiguous tail, so no line leaks).
        lines = files[0].read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
        if len(lines) < 2:
            raise ValueError(f"{files[0]}: need at least 2 lines to split train/validation")
        cut = len(lines) - max(1, math.ceil(val_fraction * len(lines)))
        rows = {"train": [{"text": "".join(lines[:cut])}], "validation": [{"text": "".join(lines[cut:])}]}
    return datasets.DatasetDict({s: datasets.Dataset.from_list(r) for s, r in rows.items()})


def load_corpus(name: str = DEFAULT_CORPUS, max_docs: int | None = None):
    """`datasets.DatasetDict` with "train" and "validation" splits and a "text" field.

    name: "licenses", "eurlex", or a path to a .txt file / directory of .txt files.
    max_docs: keep only the first max_docs documents of each split (quick tests / smoke runs).
    """
    key = name.strip().lower() if isinstance(name, str) else name
    if key == "licenses":
        dd = _load_licenses()
        dd = type(dd)(dict(dd))  # fresh container: the cached one must not be mutated by callers
    elif key == "eurlex":
        dd = _load_eurlex()
    elif Path(name).expanduser().exists():
        dd = _load_text_path(Path(name).expanduser())
    else:
        raise ValueError(f"unknown corpus {name!r}; valid: 'licenses', 'eurlex', or an existing path to a "
                         f".txt file or a directory of .txt files")
    if max_docs is not None:
        if max_docs < 1:
            raise ValueError(f"max_docs must be >= 1 or None, got {max_docs}")
        dd = type(dd)({s: d.select(range(min(max_docs, len(d)))) for s, d in dd.items()})
    for s, d in dd.items():
        if len(d) == 0:
            raise ValueError(f"corpus {name!r}: split {s!r} is empty")
    return dd


def corpus_stats(dd) -> dict[str, dict[str, int]]:
    """Per split: number of documents, characters and UTF-8 bytes."""
    out = {}
    for s, d in dd.items():
        texts = list(d["text"])
        out[s] = {"docs": len(texts), "chars": sum(map(len, texts)),
                  "bytes": sum(len(t.encode("utf-8")) for t in texts)}
    return out


# ------------------------------------------------------------------------------------------------- token cache
def default_cache_root() -> Path:
    env = os.environ.get("ALTGRAD_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "altgrad" / "tokens"


def _corpus_slug(name: str) -> str:
    key = name.strip().lower()
    if key in ("licenses", "eurlex"):
        return key
    return slug(Path(name).expanduser().resolve().name)[:40]


def _content_hash(dd, tokenizer: str) -> str:
    h = hashlib.sha256(f"altgrad-tokens-v{CACHE_FORMAT}|{tokenizer}".encode())
    for s in ("train", "validation"):
        h.update(f"|split={s}|n={len(dd[s])}|".encode())
        for batch in dd[s].iter(batch_size=1024):
            for t in batch["text"]:
                b = t.encode("utf-8")
                h.update(len(b).to_bytes(8, "little") + b)
    return h.hexdigest()


def _digest_memo(root: Path, corpus: str, tokenizer: str, max_docs: int | None) -> Path | None:
    """Where build() remembers the "licenses" corpus's content hash (None for other corpora), named by what that
    hash is a function of and is cheap to read: this file's code (filters, split, hash), the yaml parser's version,
    the licence files' names, sizes and mtimes, the tokenizer and max_docs. Parsing the 2,300 files to hash them
    costs every process that builds the corpus ~1.7 s (a study worker, a notebook kernel); stat-ing them ~20 ms.
    A memo only names a token cache, which _cache_valid still checks against its meta.json."""
    if str(corpus).strip().lower() != "licenses":
        return None
    try:
        src = licenses_dir()
        h = hashlib.sha256(f"{CACHE_FORMAT}|{tokenizer}|{max_docs}|{yaml.__version__}|{src}|".encode())
        h.update(Path(__file__).read_bytes())
        for p in sorted(src.glob("*.LICENSE")):
            st = p.stat()
            h.update(f"|{p.name}|{st.st_size}|{st.st_mtime_ns}".encode())
    except (OSError, RuntimeError):   # no licences: load_corpus names the problem
        return None
    return root / "digests" / f"licenses-{tokenizer}-{h.hexdigest()[:32]}.json"


def _read_memo(memo: Path | None) -> str:
    try:
        return str(json.loads(memo.read_text())["content_sha256"]) if memo is not None else ""
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _tokenize_split(ds, enc, eot: int, dtype, out: Path, desc: str, num_threads: int, progress: bool) -> dict:
    """Tokenize documents (each followed by EOT) into `out`, atomically (io.atomic_file)."""
    h = hashlib.sha256()
    n_tok = 0
    with atomic_file(out) as f, progress_bar(len(ds), desc=desc, unit="doc", enabled=bool(progress)) as bar:
        for batch in ds.iter(batch_size=256):
            texts = batch["text"]
            for ids in enc.encode_ordinary_batch(texts, num_threads=num_threads):
                ids.append(eot)
                arr = np.asarray(ids, dtype=dtype)
                b = arr.tobytes()
                f.write(b)
                h.update(b)
                n_tok += arr.size
            bar.update(len(texts))
    return {"tokens": n_tok, "sha256": h.hexdigest()}


def _cache_valid(d: Path) -> dict | None:
    """meta.json if the cache in `d` is complete and its .bin files match it, else None."""
    try:
        meta = json.loads((d / "meta.json").read_text())
        if meta.get("format") != CACHE_FORMAT:
            return None
        itemsize = np.dtype(meta["dtype"]).itemsize
        for s in SPLITS:
            p = d / f"{s}.bin"
            info = meta["splits"][s]
            if p.stat().st_size != info["tokens"] * itemsize or _file_sha256(p) != info["sha256"]:
                return None
        return meta
    except (OSError, ValueError, KeyError, TypeError):
        return None


def unigram_entropy(tokens: np.ndarray) -> float:
    """Plug-in entropy (nats/token) of the token ids' frequencies: the loss of the best no-context model of them."""
    counts = np.bincount(np.asarray(tokens, dtype=np.int64)).astype(np.float64)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def eval_unigram_entropy(corpus: str = DEFAULT_CORPUS, tokenizer: str = DEFAULT_TOKENIZER,
                         max_docs: int | None = None) -> float:
    """Unigram entropy of the evaluation split (val) of a config's corpus: a model whose val loss is not below it has
    not learned more than token frequencies (the studies' control check refuses to call such a profile clear).
    The whole split, not the few eval batches: their plug-in entropy would be biased low by the unseen tokens."""
    return TokenCorpus.build(corpus, tokenizer, max_docs=max_docs, progress=False).unigram_entropy("val")


@dataclass
class TokenCorpus:
    """Token ids of one corpus under one tokenizer, memory-mapped per split (documents joined by EOT)."""

    train: np.ndarray = field(repr=False)
    val: np.ndarray = field(repr=False)
    vocab_size: int
    eot: int
    tokenizer_name: str
    corpus_name: str
    meta: dict = field(repr=False)
    cache_dir: Path
    from_cache: bool = False  # True when build() found a valid cache and did not tokenize
    _entropy: dict = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, corpus: str = DEFAULT_CORPUS, tokenizer: str = DEFAULT_TOKENIZER,
              cache_dir: str | Path | None = None, max_docs: int | None = None,
              num_threads: int = 2, progress: bool = True) -> TokenCorpus:
        """Load (or tokenize once and cache) `corpus` under `tokenizer`; returns memory-mapped splits."""
        tok_name = canonical_tokenizer_name(tokenizer)
        enc = get_tokenizer(tok_name)
        root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_root()
        memo = _digest_memo(root, corpus, tok_name, max_docs)
        digest = _read_memo(memo)   # the licences' content hash without parsing them, when nothing changed
        meta = _cache_valid(root / f"{_corpus_slug(corpus)}-{tok_name}-{digest[:16]}") if digest else None
        if meta is None:
            dd = load_corpus(corpus, max_docs=max_docs)
            digest = _content_hash(dd, tok_name)
        d = root / f"{_corpus_slug(corpus)}-{tok_name}-{digest[:16]}"
        meta = meta or _cache_valid(d)
        from_cache = meta is not None
        if meta is None:
            t0 = time.perf_counter()
            d.mkdir(parents=True, exist_ok=True)
            (d / "meta.json").unlink(missing_ok=True)  # invalidate first: meta.json is the "complete" marker
            vocab = enc.n_vocab
            dtype = np.uint16 if vocab <= 2**16 else np.uint32
            stats = corpus_stats(dd)
            splits = {}
            for s, hf in (("train", "train"), ("val", "validation")):
                info = _tokenize_split(dd[hf], enc, enc.eot_token, dtype, d / f"{s}.bin",
                                       f"tokenize {corpus} {s} ({tok_name})", num_threads, progress)
                splits[s] = {**stats[hf], **info}
            meta = {"format": CACHE_FORMAT, "corpus": str(corpus), "tokenizer": tok_name, "vocab_size": vocab,
                    "eot": enc.eot_token, "dtype": np.dtype(dtype).name, "content_sha256": digest,
                    "max_docs": max_docs, "splits": splits, "credit": CORPUS_CREDITS.get(str(corpus).lower()),
                    "build_seconds": round(time.perf_counter() - t0, 3)}
            atomic_write_text(d / "meta.json", json.dumps(meta, indent=1))
            if progress:
                print(f"[altgrad.data] {corpus} / {tok_name}: train {splits['train']['tokens']:,} tokens, "
                      f"val {splits['val']['tokens']:,} tokens in {meta['build_seconds']:.1f}s -> {d}")
        if memo is not None and _read_memo(memo) != digest:
            try:
                memo.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_text(memo, json.dumps({"content_sha256": digest}))
            except OSError:   # a read-only cache: the next process hashes the texts again
                pass
        arrays = {s: np.memmap(d / f"{s}.bin", dtype=np.dtype(meta["dtype"]), mode="r") for s in SPLITS}
        return cls(train=arrays["train"], val=arrays["val"], vocab_size=int(meta["vocab_size"]),
                   eot=int(meta["eot"]), tokenizer_name=tok_name, corpus_name=str(corpus), meta=meta,
                   cache_dir=d, from_cache=from_cache)

    @classmethod
    def for_data(cls, data: DataConfig, progress: bool = False) -> TokenCorpus:
        """The corpus of a run's data part (TrainConfig.data_config)."""
        return cls.build(data.corpus, data.tokenizer, max_docs=data.max_docs, progress=progress)

    def split_data(self, split: str) -> np.ndarray:
        key = _SPLIT_ALIASES.get(split)
        if key is None:
            raise ValueError(f"unknown split {split!r}; valid: {sorted(_SPLIT_ALIASES)}")
        return self.train if key == "train" else self.val

    def get_batch(self, split: str, batch_size: int, block_size: int, seed: int, step: int, device=None):
        """(x, y) int64 tensors (B, T); y is x shifted by one. Depends only on (seed, split, step, B, T)."""
        import torch

        data = self.split_data(split)
        if batch_size < 1 or block_size < 1:
            raise ValueError(f"batch_size and block_size must be >= 1, got {batch_size}, {block_size}")
        if len(data) < block_size + 1:
            raise ValueError(f"split {split!r} has {len(data)} tokens, fewer than block_size+1={block_size + 1}")
        key = f"altgrad-batch|{int(seed)}|{_SPLIT_ALIASES[split]}|{int(step)}".encode()
        rng = np.random.default_rng(int.from_bytes(hashlib.sha256(key).digest()[:8], "little"))
        ix = rng.integers(0, len(data) - block_size, size=batch_size)          # (B,)
        rows = np.asarray(data[ix[:, None] + np.arange(block_size + 1)], dtype=np.int64)  # (B, T+1)
        x = torch.from_numpy(rows[:, :-1].copy())                              # (B, T)
        y = torch.from_numpy(rows[:, 1:].copy())                               # (B, T)
        if device is not None:
            x, y = x.to(device), y.to(device)
        return x, y

    def eval_batches(self, split: str, n_batches: int, batch_size: int, block_size: int, seed: int, device=None):
        """The same `n_batches` (x, y) batches every time: get_batch with step = eval index 0..n-1."""
        for i in range(n_batches):
            yield self.get_batch(split, batch_size, block_size, seed=seed, step=i, device=device)

    def train_batch(self, data: DataConfig, step: int, device=None):
        """The training batch of 0-based `step` of a run with data part `data` (TrainConfig.data_config)."""
        return self.get_batch("train", data.batch_size, data.block_size, seed=data.seed, step=step, device=device)

    def val_batches(self, data: DataConfig, device=None):
        """The run's eval_iters validation batches: the same in every eval, and for every seed (VAL_SEED)."""
        return self.eval_batches("val", data.eval_iters, data.batch_size, data.block_size, seed=VAL_SEED,
                                 device=device)

    def unigram_entropy(self, split: str = "train") -> float:
        """Entropy (nats/token) of the split's unigram token distribution: a no-context loss baseline."""
        key = _SPLIT_ALIASES.get(split, split)
        if key not in self._entropy:
            self._entropy[key] = unigram_entropy(self.split_data(split))
        return self._entropy[key]

    def summary(self) -> dict[str, Any]:
        """docs, chars, bytes, tokens per split; vocab; bytes/token; unigram entropy (nats)."""
        out: dict[str, Any] = {"corpus": self.corpus_name, "tokenizer": self.tokenizer_name,
                               "vocab_size": self.vocab_size}
        for s in SPLITS:
            info = self.meta["splits"][s]
            for k in ("docs", "chars", "bytes", "tokens"):
                out[f"{s}_{k}"] = int(info[k])
            out[f"{s}_bytes_per_token"] = info["bytes"] / max(1, info["tokens"])
            out[f"{s}_unigram_entropy"] = self.unigram_entropy(s)
        return out
