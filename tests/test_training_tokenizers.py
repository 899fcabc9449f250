"""Tests for altgrad_lib.training.tokenizers: r50k ranks provenance, truncated GPT-2 vocabularies, offline behaviour."""
from __future__ import annotations

import hashlib
import inspect
import re

import pytest
import tiktoken.load
import tiktoken_ext.openai_public as openai_public

from altgrad_lib.training import tokenizers as T

SAMPLE = (
    "Permission is hereby granted, free of charge, to any person obtaining a copy of this software and "
    "associated documentation files (the \"Software\"), to deal in the Software without restriction.\n\n"
    "  THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND — naïve café 日本語 1234567 x=y+2;\n"
    "It's we'll they've I'm\t\ttabs   and trailing spaces   \n"
)
COMMON_WORDS = ["the", " the", " and", " of", " to", " software", " Permission", " is", " free", " any",
                " person", " world", " shall", " work", " code", " use", " time", " people", " law", " public"]


def test_hash_and_pattern_match_tiktoken():
    # Our constants must be the very ones tiktoken uses for r50k_base (the oracle is tiktoken's source).
    src = inspect.getsource(openai_public.r50k_base)
    assert T.R50K_SHA256 in src and T.R50K_URL in src
    assert T.R50K_PAT_STR == openai_public.r50k_pat_str


def test_whisper_asset_hash():
    p = T.whisper_ranks_path()
    assert p is not None, "openai-whisper (--no-deps) should be installed in the venv"
    assert hashlib.sha256(p.read_bytes()).hexdigest() == T.R50K_SHA256


def test_full_gpt2_known_ids():
    enc = T.get_tokenizer("gpt2")
    assert enc.n_vocab == 50257 and enc.eot_token == 50256
    # Well-known GPT-2 ids (e.g. from the HF gpt2 tokenizer): "Hello world" -> [15496, 995].
    assert enc.encode("Hello world") == [15496, 995]
    assert enc.encode("<|endoftext|>", allowed_special="all") == [50256]


@pytest.mark.parametrize("name,n", [("gpt2-4k", 4096), ("gpt2-4096", 4096), ("gpt2-2k", 2048),
                                    ("gpt2-8k", 8192), ("GPT2-300", 300)])
def test_truncated_vocab_shape(name, n):
    enc = T.get_tokenizer(name)
    assert enc.n_vocab == n + 1 and enc.eot_token == n
    assert T.canonical_tokenizer_name(name) == f"gpt2-{n}"
    assert enc.encode("<|endoftext|>", allowed_special="all") == [n]


def test_truncated_same_ids_as_gpt2_for_common_words():
    full, small = T.get_tokenizer("gpt2"), T.get_tokenizer("gpt2-4k")
    for w in COMMON_WORDS:
        ids = full.encode_ordinary(w)
        assert max(ids) < 4096, w  # the comparison is only meaningful for in-vocabulary words
        assert small.encode_ordinary(w) == ids, w


def test_truncated_prefix_property_on_text():
    # BPE with rank-ordered merges: whenever GPT-2's tokens for a pre-token all have rank < N, the truncated
    # tokenizer applies exactly the same merges, so ids agree; otherwise it must use only ids < N.
    full, small = T.get_tokenizer("gpt2"), T.get_tokenizer("gpt2-2k")
    pieces = re.findall(r" ?\w+| ?[^\w\s]+|\s+", SAMPLE * 2 + " ".join(COMMON_WORDS))
    n_same = 0
    for p in pieces:
        f, s = full.encode_ordinary(p), small.encode_ordinary(p)
        assert all(i < 2048 for i in s)
        if max(f) < 2048:
            assert s == f, p
            n_same += 1
    assert n_same > 20


@pytest.mark.parametrize("name", ["gpt2", "gpt2-4k", "gpt2-256", "gpt2-1000"])
def test_roundtrip_and_range(name):
    enc = T.get_tokenizer(name)
    ids = enc.encode_ordinary(SAMPLE)
    assert enc.decode(ids) == SAMPLE
    assert all(0 <= i < enc.n_vocab - 1 for i in ids)  # ordinary text never produces the EOT id


def test_byte_level_256():
    enc = T.get_tokenizer("gpt2-256")
    assert len(enc.encode_ordinary(SAMPLE)) == len(SAMPLE.encode("utf-8"))


@pytest.mark.parametrize("bad", ["gpt3", "gpt2-", "gpt2-255", "gpt2-50256", "gpt2-100k", "bpe-4k"])
def test_bad_names(bad):
    with pytest.raises(ValueError, match="gpt2"):
        T.get_tokenizer(bad)


@pytest.fixture
def fresh_ranks():
    T.load_r50k_ranks.cache_clear()
    T._build.cache_clear()
    yield
    T.load_r50k_ranks.cache_clear()
    T._build.cache_clear()


def _no_download(*a, **k):
    raise AssertionError("must not try the network when offline")


def test_offline_without_whisper_gives_install_hint(fresh_ranks, monkeypatch, tmp_path):
    monkeypatch.setattr(T, "whisper_ranks_path", lambda: None)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # empty tiktoken cache
    monkeypatch.setenv("ALTGRAD_OFFLINE", "1")
    monkeypatch.setattr(tiktoken.load, "load_tiktoken_bpe", _no_download)
    with pytest.raises(RuntimeError, match=r"pip install --no-deps openai-whisper"):
        T.get_tokenizer("gpt2-4k")


def test_bad_hash_is_rejected_then_tiktoken_cache_used(fresh_ranks, monkeypatch, tmp_path):
    good = T.whisper_ranks_path().read_bytes()
    fake = tmp_path / "gpt2.tiktoken"
    fake.write_bytes(good.replace(b" 100\n", b" 101\n", 1))  # tampered copy
    monkeypatch.setattr(T, "whisper_ranks_path", lambda: fake)
    cache = tmp_path / "cache"
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    monkeypatch.setenv("ALTGRAD_OFFLINE", "1")
    monkeypatch.setattr(tiktoken.load, "load_tiktoken_bpe", _no_download)
    with pytest.raises(RuntimeError, match="sha256"):
        T.load_r50k_ranks()
    T.load_r50k_ranks.cache_clear()
    # A genuine copy in tiktoken's own cache location is the second source.
    cache.mkdir()
    (cache / hashlib.sha1(T.R50K_URL.encode()).hexdigest()).write_bytes(good)
    ranks, source = T.load_r50k_ranks()
    assert "tiktoken cache" in source and len(ranks) == 50256
